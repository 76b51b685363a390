"""Cost of a cell: the host's price over the measured window, per output token and per success.

cost_per_1m_output_tokens = price_per_hour * duration_s / 3600 / output_tokens * 1e6
cost_per_1k_successes     = price_per_hour * duration_s / 3600 / successes * 1e3

A success is a request that completed without error *and* whose answer would have been right:
successes = ok requests x the variant's golden-set accuracy on the same endpoint and sampling
(the perf prompts have no reference answer, so the golden set supplies the rate). Errors,
truncated or wrong answers are not successes, so a quant that is cheaper per token but answers
worse does not look cheaper per success. Without a golden set, successes = ok requests.

Those are the steady-state costs (the measured window only). ``paid`` gives the same from
what the run really paid for (its instances' billed time, or its servers' time up), and the
sweep efficiency: the share of that time spent measuring.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass


def cost_fields(*, price_per_hour: float, duration_s: float, output_tokens: int,
                n_ok: int, accuracy: float | None = None) -> dict[str, float]:
    successes = n_ok * accuracy if accuracy is not None and not math.isnan(accuracy) else n_ok
    spent = price_per_hour * duration_s / 3600.0 if duration_s > 0 else math.nan
    return {
        "cost_per_1m_output_tokens": spent / output_tokens * 1e6 if output_tokens else math.nan,
        "cost_per_1k_successes": spent / successes * 1e3 if successes else math.nan,
    }


# -- what the run really paid -------------------------------------------------------------------
EC2_MINIMUM_S = 60.0  # EC2 bills Linux instances per second, with a one-minute minimum


@dataclass
class Paid:
    """What one run paid for, per target, and its efficiency.

    paid_s (per target) = the billed seconds of its instances (launch to terminate, at least
        the minimum each) where it had instances; else the seconds its variants' servers were
        up (launch asked to stopped): a local or static server is paid for while it is used
    paid_usd = each instance's billed seconds x its price per hour (its placement's, else
        the target's) / 3600; a server's seconds x the target's price / 3600
    sweep_efficiency = seconds inside measured windows / paid_s, over the run
    paid cost of a cell = cost_fields at an effective price of paid_usd per measured hour of
        its target: model loads, warm-ups, golden sets and idle time spread over the cells
    """

    hosts: list[dict]  # the ``hosts`` rows, priced
    paid_s: dict[str, float]  # target -> seconds paid
    paid_usd: dict[str, float]
    measure_s: dict[str, float]

    @property
    def sweep_efficiency(self) -> float:
        paid = sum(self.paid_s.values())
        return sum(self.measure_s.values()) / paid if paid else math.nan

    def cell_fields(self, cell: dict) -> dict[str, float]:
        """``paid_cost_per_1m_output_tokens`` and ``paid_cost_per_1k_successes``."""
        target, measured = cell.get("target"), cell.get("duration_s")
        if not measured or not self.measure_s.get(target) or cell.get("n_ok") is None:
            return {}
        per_hour = self.paid_usd[target] / (self.measure_s[target] / 3600.0)
        fields = cost_fields(price_per_hour=per_hour, duration_s=measured,
                             output_tokens=cell.get("output_tokens_total") or 0,
                             n_ok=cell["n_ok"], accuracy=cell.get("accuracy"))
        return {f"paid_{key}": value for key, value in fields.items()}


def paid(hosts: list[dict], units: list[dict], price_per_hour: dict[str, float],
         now: dt.datetime) -> Paid:
    """Prices ``hosts`` (instances) and ``units`` (variant server spans) per target;
    ``price_per_hour`` maps each target to its host's price."""
    priced, paid_s, paid_usd = [], {}, {}
    for host in hosts:
        ended = host.get("ended_at") or now
        billed = max(EC2_MINIMUM_S, (ended - host["launched_at"]).total_seconds())
        price = host.get("price_per_hour")  # its own where it says (a fallback placement)
        if price is None:
            price = price_per_hour.get(host["target"], math.nan)
        cost = price * billed / 3600.0
        priced.append({**host, "billed_s": billed, "price_per_hour": price, "cost_usd": cost})
        paid_s[host["target"]] = paid_s.get(host["target"], 0.0) + billed
        paid_usd[host["target"]] = paid_usd.get(host["target"], 0.0) + cost
    measure_s: dict[str, float] = {}
    for unit in units:
        target = unit["target"]
        measure_s[target] = measure_s.get(target, 0.0) + (unit.get("measure_s") or 0.0)
        if target in {h["target"] for h in hosts}:
            continue  # its instance's bill already covers this unit
        if unit.get("started_at") and unit.get("ended_at"):
            span = (unit["ended_at"] - unit["started_at"]).total_seconds()
            paid_s[target] = paid_s.get(target, 0.0) + span
            paid_usd[target] = paid_usd.get(target, 0.0) \
                + span * price_per_hour.get(target, math.nan) / 3600.0
    return Paid(priced, paid_s, paid_usd, measure_s)
