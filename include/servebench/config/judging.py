"""What a sweep's results are held to: the SLOs a request meets for goodput, the golden sets
and the quality gate on them, cross-stack agreement, and how the nightly detector judges the
history."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servebench.config.base import _Strict


class SLOSpec(_Strict):
    """Service-level objectives for goodput (DistServe): a request counts if it meets all."""

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2e_ms: float | None = Field(None, gt=0)


class GoldenSetRef(_Strict):
    """A golden set (JSONL) and how many tokens its answers may take."""

    name: str
    path: str = Field(description="JSONL path, relative to the project root")
    max_tokens: int = Field(16, gt=0)
    concurrency: int = Field(4, gt=0)


class GateSpec(_Strict):
    """Quality gate: a variant fails on a significant drop below ``floor`` x baseline."""

    alpha: float = Field(0.01, gt=0, lt=1, description="significance of the exact McNemar test")
    floor: float = Field(0.99, gt=0, le=1, description="minimum accuracy relative to baseline")


class ConfirmSpec(_Strict):
    """The same morning's re-measurement of the night's suspects (``servebench.trends.confirm``):
    each suspect variant relaunched ``launches`` times interleaved with a reference variant of
    its target on the same host (ABBA), only its suspect cells measured, no golden set."""

    launches: int = Field(3, ge=2, le=10,
                          description="relaunches of each side (suspect and reference)")
    budget_s: float = Field(
        600.0, ge=0,
        description="seconds the confirm task may spend, estimated from tonight's launches "
                    "and cells; the suspects beyond it are listed as not re-measured")
    suspect_sigmas: float = Field(
        3.0, gt=0,
        description="a series whose night is worse than its baseline's median by this many of "
                    "its nights' noise (and by trends.min_change) is a suspect, alert or not")


class TrendsSpec(_Strict):
    """How the nightly detector judges this sweep's history (``servebench.trends``)."""

    min_change: float = Field(
        0.005, ge=0, lt=1,
        description="smallest relative change of a perf metric worth an alert, on top of each "
                    "series' own noise (accuracy keeps its binomial test); raise it where the "
                    "host's own speed wanders, e.g. 0.2 on a shared VM")
    detect_at_least: float = Field(
        0.10, gt=0, lt=1,
        description="the worse step each perf series should catch within three nights "
                    "(0.10: 10%); the digest lists the series whose own noise cannot "
                    "(trends.detectability)")
    detect_accuracy_drop: float = Field(
        5.0, gt=0, le=100,
        description="the same for golden-set accuracy, in points: its noise is set by the "
                    "golden set's size, not the cells', and a relative step means different "
                    "drops at different levels (10% of 97% is 9.7 points)")
    confirm: ConfirmSpec | None = Field(
        default_factory=ConfirmSpec,
        description="re-measure the night's suspects the same morning by interleaved "
                    "relaunches (null: off); a host paid by the machine (ec2) is held after "
                    "its units until its relaunches are done")

    @property
    def holds_hosts(self) -> bool:
        """Whether a host paid by the machine is kept after its units for the same
        morning's relaunches (``provision.interface.host_session``)."""
        return self.confirm is not None and self.confirm.budget_s > 0


class CrossStackGroup(_Strict):
    """Variants that serve the same model on different stacks. At the same precision
    (``precision: same``) their golden-set answers should agree, and a member that disagrees
    has a correctness bug; across formats (``mixed``: GGUF q4_k_m on llama.cpp, W4A16 on
    vLLM) the group says where a format or engine parts from the others, item by item."""

    name: str
    members: list[str] = Field(min_length=2, description="'target/variant' names")
    min_agreement: float = Field(0.98, gt=0, le=1, description="share of identical answers")
    precision: Literal["same", "mixed"] = Field(
        "same", description="same: one precision on every stack (a disagreement is a "
                            "correctness bug); mixed: different quantizations of one model")
