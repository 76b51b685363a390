import datetime as dt
import math

import pytest
from servebench.cost import cost_fields, paid


def test_cost_per_token_and_per_success():
    # $3.60/h for 10 s = $0.01; 20,000 tokens; 100 ok requests at 80% accuracy = 80 successes
    got = cost_fields(price_per_hour=3.6, duration_s=10, output_tokens=20_000, n_ok=100,
                      accuracy=0.8)
    assert got["cost_per_1m_output_tokens"] == pytest.approx(0.5)
    assert got["cost_per_1k_successes"] == pytest.approx(0.125)


def test_wrong_answers_make_success_dearer_and_no_golden_set_counts_ok_requests():
    kw = dict(price_per_hour=3.6, duration_s=10, output_tokens=20_000, n_ok=100)
    assert cost_fields(**kw, accuracy=0.5)["cost_per_1k_successes"] == pytest.approx(0.2)
    assert cost_fields(**kw)["cost_per_1k_successes"] == pytest.approx(0.1)


def test_nothing_to_divide_by_is_nan():
    got = cost_fields(price_per_hour=1.0, duration_s=0, output_tokens=0, n_ok=0)
    assert math.isnan(got["cost_per_1m_output_tokens"]) and math.isnan(got["cost_per_1k_successes"])


T0 = dt.datetime(2026, 12, 1, 2, 0, tzinfo=dt.UTC)


def _unit(target, start_s, end_s, measure_s):
    return {"target": target, "started_at": T0 + dt.timedelta(seconds=start_s),
            "ended_at": T0 + dt.timedelta(seconds=end_s), "measure_s": measure_s}


def test_an_instance_bills_from_launch_to_terminate_and_spreads_over_the_cells():
    # one instance up 1 h at $3.60/h; its two variants measured 30 min in all
    hosts = [{"host": "i-1", "target": "gpu", "launched_at": T0,
              "ended_at": T0 + dt.timedelta(hours=1)}]
    units = [_unit("gpu", 300, 1800, 900.0), _unit("gpu", 1900, 3500, 900.0)]
    bill = paid(hosts, units, {"gpu": 3.6}, now=T0 + dt.timedelta(hours=2))
    assert bill.paid_s == {"gpu": 3600.0} and bill.paid_usd == {"gpu": pytest.approx(3.6)}
    [host] = bill.hosts
    assert host["billed_s"] == 3600.0 and host["cost_usd"] == pytest.approx(3.6)
    assert bill.sweep_efficiency == pytest.approx(0.5)
    # a cell of 10 s with 20,000 tokens pays $7.20 per measured hour: twice the list price
    cell = {"target": "gpu", "duration_s": 10.0, "output_tokens_total": 20_000, "n_ok": 100}
    got = bill.cell_fields(cell)
    assert got["paid_cost_per_1m_output_tokens"] == pytest.approx(1.0)
    assert got["paid_cost_per_1k_successes"] == pytest.approx(0.2)


def test_an_instance_still_up_bills_until_now_and_short_ones_the_minimum():
    hosts = [{"host": "i-1", "target": "a", "launched_at": T0, "ended_at": None},
             {"host": "i-2", "target": "b", "launched_at": T0,
              "ended_at": T0 + dt.timedelta(seconds=5)}]
    bill = paid(hosts, [], {"a": 1.0, "b": 1.0}, now=T0 + dt.timedelta(minutes=30))
    assert bill.paid_s == {"a": 1800.0, "b": 60.0}
    assert math.isnan(bill.sweep_efficiency) is False and bill.sweep_efficiency == 0.0


def test_without_an_instance_the_servers_time_up_is_what_was_paid():
    units = [_unit("local", 0, 100, 60.0), _unit("local", 110, 210, 60.0)]
    bill = paid([], units, {"local": 0.36}, now=T0)
    assert bill.paid_s == {"local": 200.0}
    assert bill.sweep_efficiency == pytest.approx(0.6)
    assert bill.cell_fields({"target": "local", "duration_s": None, "n_ok": 0}) == {}
