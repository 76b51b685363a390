"""One raw record per benchmark request, and the clock its times come from.

Every time in a :class:`RequestRecord` is a wall-clock epoch timestamp in **seconds** (float).
All times of one run come from one :class:`Clock`, which takes a single
``(time.time(), time.perf_counter())`` anchor and then adds ``perf_counter`` deltas, so
differences between two times of the same run have ``perf_counter`` precision (sub-microsecond)
while the absolute values stay comparable with other processes' ``time.time()`` on the same host
(to within the anchor's own error, typically well under a millisecond).

The records are the ground truth from which every metric in :mod:`servebench.metrics` is
derived; they are stored as-is (see :meth:`RequestRecord.to_row`) so any later metric can be
recomputed. The load generator writes them and the metrics read them, so this module sits below
both and imports nothing of servebench.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any


class Clock:
    """Wall-clock epoch seconds with ``perf_counter`` resolution, anchored once.

    ``now()`` = ``anchor_wall + (perf_counter() - anchor_perf)``. Create one per run and pass it
    to everything that stamps times in that run.
    """

    __slots__ = ("anchor_perf", "anchor_wall")

    def __init__(self) -> None:
        self.anchor_perf: float = time.perf_counter()
        self.anchor_wall: float = time.time()

    def now(self) -> float:
        """Current time as epoch seconds (float)."""
        return self.anchor_wall + (time.perf_counter() - self.anchor_perf)


@dataclass(slots=True)
class RequestRecord:
    """Raw outcome of one streamed request. Times are epoch seconds from one run :class:`Clock`.

    Attributes:
        request_id: unique id within the run (``"<cell_id>:<index>"`` from the runners).
        cell_id: the benchmark cell (target x variant x workload x load point) it belongs to.
        scheduled_at: when the request was due to be sent (closed loop: when its worker became
            free — the phase start or its previous request's ``done_at``; open loop: its
            arrival time).
        sent_at: fast client: right before the request bytes were written to an open keep-alive
            connection (connections are opened before the window); httpx client: just before
            the request was handed to httpx (connection set-up or pool wait, if any, counts
            towards TTFT).
        first_chunk_at: arrival of the first chunk carrying generated text (``None`` if none).
            Fast client on Linux: the kernel's receive time of the read that carried it.
        done_at: end of the stream (``[DONE]``/EOF), or when the error was observed.
        chunk_times: arrival time of every content chunk (chunks carrying generated text), in
            order. Chunks delivered by the same network read share one timestamp (fast client
            on Linux: that read's kernel receive time, so client event-loop delays don't count).
        chunk_tokens: tokens in each content chunk, parallel to ``chunk_times``. Servers that
            send usage only at the end give no per-chunk counts, so each content chunk counts 1.
            When a server sends cumulative usage in every chunk (vLLM
            ``continuous_usage_stats``), the count is the increase of ``completion_tokens``.
        prompt_tokens_requested: prompt length the workload asked for, if known.
        prompt_tokens: prompt tokens from the server's ``usage`` (``None`` if not reported).
        prompt_tokens_cached: of those, served from the prefix cache
            (``usage.prompt_tokens_details.cached_tokens``: OpenAI, vLLM with
            ``--enable-prompt-tokens-details`` -- which omits it when 0 --, SGLang with
            ``--enable-cache-report``, TensorRT-LLM); ``None`` if not reported.
        output_tokens_requested: ``max_tokens`` the workload asked for, if known.
        output_tokens: completion tokens from the server's ``usage`` (``None`` if not reported).
        output_text: concatenated generated text (``delta.content`` / ``choices[0].text``).
        finish_reason: the server's last non-null ``finish_reason``.
        http_status: HTTP status code (``None`` if no response arrived).
        error: ``"<ErrorClass>: <short reason>"``, or ``None`` if the request succeeded.
        served_model: the ``model`` field the server returned.
        warmup: True for warm-up requests (kept for the record, excluded from metrics).
    """

    request_id: str
    cell_id: str
    scheduled_at: float
    sent_at: float = float("nan")
    first_chunk_at: float | None = None
    done_at: float = float("nan")
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens_requested: int | None = None
    prompt_tokens: int | None = None
    prompt_tokens_cached: int | None = None
    output_tokens_requested: int | None = None
    output_tokens: int | None = None
    output_text: str = ""
    finish_reason: str | None = None
    http_status: int | None = None
    error: str | None = None
    served_model: str | None = None
    warmup: bool = False

    @property
    def ok(self) -> bool:
        """True when the request completed with HTTP 2xx and no transport/stream error."""
        return self.error is None and self.http_status is not None and 200 <= self.http_status < 300

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RequestRecord:
        """The record a stored ``requests`` row was made from (:meth:`to_row`'s inverse: its
        other columns -- ``ok``, the run's ids -- left out)."""
        return cls(**{k: v for k, v in row.items() if k in cls.__dataclass_fields__})

    @classmethod
    def measured(cls, requests: Any, cell_id: str) -> list[RequestRecord]:
        """A cell's measured requests from a stored ``requests`` frame (pandas), warm-up and
        failed requests left out: what its percentiles are made of."""
        rows = requests[(requests["cell_id"] == cell_id) & ~requests["warmup"]
                        & requests["ok"]]
        return [cls.from_row(r) for r in rows.to_dict("records")]

    def to_row(self) -> dict[str, Any]:
        """Flat dict for Arrow/Parquet: one column per field, lists stay lists, plus ``ok``."""
        row = asdict(self)
        row["ok"] = self.ok
        return row
