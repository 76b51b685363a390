"""The energy lines of a run (the digest, the report and ``servebench summary`` list them):
what the host's counter measured per variant, or why nothing was (``servebench.energy``)."""

from __future__ import annotations

import pandas as pd


def energy_lines(cells: pd.DataFrame) -> list[str]:
    """What the host's energy counter saw (servebench.energy): one line per variant whose
    cells it measured -- joules per output token over its cells, and what counted them --;
    for the targets none of whose cells was measured, one line per reason, naming them."""
    if cells.empty or "energy_source" not in cells.columns:
        return []
    lines, unmeasured = [], {}
    for target, mine in cells.groupby("target", sort=False):
        counted = mine[mine["energy_j_per_output_token"].notna()]
        if counted.empty:
            why = mine["energy_source"].dropna()
            if len(why):
                unmeasured.setdefault(why.iloc[0], []).append(target)
            continue
        for variant, cells_of in counted.groupby("variant", sort=False):
            per_token = cells_of["energy_j_per_output_token"]
            lo, hi = float(per_token.min()), float(per_token.max())
            shown = f"{lo:.3g}" if lo == hi else f"{lo:.3g}-{hi:.3g}"
            lines.append(f"{target}/{variant}: {shown} J per output token over "
                         f"{len(cells_of)} cell{'s' if len(cells_of) > 1 else ''} "
                         f"({cells_of['energy_source'].iloc[0]})")
    lines += [f"{', '.join(targets)}: energy {why}" for why, targets in unmeasured.items()]
    return lines
