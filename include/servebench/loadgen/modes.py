"""The load-mode vocabulary: every kind of load a cell is measured under, said once with what it
is, so that a module asks a property (arrival-driven? sizable? a search?) instead of repeating
a tuple of names. Standard library only: the sweep spec (``config.load``), the load generator
and the modules that read stored cells all import it. A sweep kind's name is what the cells
table's ``load_mode`` column holds (docs/load-and-metrics.md, "Load modes")."""

from __future__ import annotations

from dataclasses import dataclass

CLOSED, OPEN, MAX, TRACE, SLO, SCHEDULE = "closed", "open", "max", "trace", "slo", "schedule"


@dataclass(frozen=True)
class LoadMode:
    """One kind of load and what it is."""

    name: str
    in_sweep: bool  # a sweep's load point (``config.LoadPoint.mode``, the ``load_mode`` column)
    runs_as: str | None  # the load generator's mode that drives it (None: not a load to run)
    arrival_driven: bool  # requests go at arrival times (an open loop), not as a worker frees up
    drawn_arrivals: bool  # its arrival times are drawn by the sweep's ``load.arrival`` process
    offered_rate: bool  # arrivals paced by a rate or a trace: its throughput is the offered load
    sizable: bool  # ``load.auto_requests`` may size its request count (``trends.sizing``)
    # a search over loads of other kinds (the SLO search); every other kind is measured at the
    # load the sweep set (a trend series' ``fixed_load``)
    searched: bool

    @property
    def closed_loop(self) -> bool:
        """Workers that each send their next request when their last one ends."""
        return self.runs_as is not None and not self.arrival_driven


_ALL = (
    LoadMode(CLOSED, in_sweep=True, runs_as=CLOSED, arrival_driven=False, drawn_arrivals=False,
             offered_rate=False, sizable=True, searched=False),
    LoadMode(OPEN, in_sweep=True, runs_as=OPEN, arrival_driven=True, drawn_arrivals=True,
             offered_rate=True, sizable=True, searched=False),
    # every request at once, capped: the server's ceiling, its throughput the server's own
    LoadMode(MAX, in_sweep=True, runs_as=MAX, arrival_driven=True, drawn_arrivals=False,
             offered_rate=False, sizable=True, searched=False),
    # a trace workload's own arrival times, run as a schedule; its requests are its rows
    LoadMode(TRACE, in_sweep=True, runs_as=SCHEDULE, arrival_driven=True, drawn_arrivals=False,
             offered_rate=True, sizable=False, searched=False),
    # the highest load within the sweep's SLOs: probes at closed or open loads (bench.slo)
    LoadMode(SLO, in_sweep=True, runs_as=None, arrival_driven=False, drawn_arrivals=False,
             offered_rate=False, sizable=False, searched=True),
    # the load generator's own: any precomputed arrival offsets (a trace's, or one client
    # process's share of another mode's: loadgen.multiproc); its pace is whatever they say
    LoadMode(SCHEDULE, in_sweep=False, runs_as=SCHEDULE, arrival_driven=True,
             drawn_arrivals=False, offered_rate=False, sizable=False, searched=False),
)
LOAD_MODES: dict[str, LoadMode] = {mode.name: mode for mode in _ALL}

SWEEP_MODES = tuple(m.name for m in _ALL if m.in_sweep)  # a load point's, the column's values
LOADGEN_MODES = tuple(m.name for m in _ALL if m.runs_as == m.name)  # what a LoadSpec runs
SEARCHED_MODES = tuple(m.name for m in _ALL if m.searched)  # for a column's ``isin``


def load_mode(name: object) -> LoadMode | None:
    """The kind named ``name`` (a stored cell's ``load_mode`` may be missing: None)."""
    return LOAD_MODES.get(name) if isinstance(name, str) else None


def is_searched(name: object) -> bool:
    """Whether a stored cell's ``load_mode`` is a search over loads (its row measured at the
    load the search found)."""
    mode = load_mode(name)
    return mode is not None and mode.searched


def at_offered_rate(name: object) -> bool:
    """Whether a stored cell's ``load_mode`` paced its arrivals (open loop, a trace), so that
    its throughput is the load offered rather than the most the server gave."""
    mode = load_mode(name)
    return mode is not None and mode.offered_rate
