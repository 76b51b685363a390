"""The same morning's relaunches of one suspect, for the tests of a provisioner's confirm:
what each kind must give (``bench.confirm.remeasure`` on the hosts it provides)."""

from __future__ import annotations

from servebench.bench.confirm import Relaunched, remeasure
from servebench.plan import Plan
from servebench.settings import get_settings
from servebench.trends.confirm import Session, Suspect


def relaunch_suspect(plan: Plan, run_id: str, target: str, *,
                     launches: int = 2) -> tuple[Relaunched, Session]:
    """Relaunches ``target``'s q8_0 as a suspect (its one cell's TPOT p50) beside its f16
    reference, ``launches`` times each, ABBA; asserts that each relaunch measured the cell.
    The relaunches and the session they were for."""
    [workload] = plan.spec.workloads
    [point] = plan.spec.load.points_for(workload)
    suspect = Suspect(series_id="s", target=target, stack="llama_cpp", variant="q8_0",
                      workload=workload.name, load_point=point.label, metric="tpot_ms_p50",
                      source="suspect", value=2.0, level=1.0, noise=0.1, start=0, night=0)
    session = Session(target, "q8_0", "f16", suspects=[suspect])
    [cell] = session.cells
    done = remeasure(plan, [session], run_id, get_settings(), launches=launches)[
        (target, "q8_0")]
    assert done.failure is None
    for side in (done.suspect, done.reference):  # each relaunch measured its cell
        assert len(side[cell]) == launches and all(row and row["tpot_ms_p50"] > 0
                                                    for row in side[cell]), side
    return done, session
