import math

import pytest

from servebench.cost import cost_fields


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
