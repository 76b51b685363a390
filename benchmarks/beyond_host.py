#!/usr/bin/env python3
"""The ``beyond_host`` rule (``trends.nightly``) on simulated pairs of variants: how often a
host move both share is called one variant's own, and how often a victim that moved beyond
its host is caught, with the size said. Each pair: ``--before`` nights, then ``--after``
nights from the host's move (``--host``, both variants), the victim moved ``beyond`` more;
each night's host factor shared by both (``--host-sd``), each launch its own (``--launch``).
Prints one row per seed range and noise.

  .venv/bin/python benchmarks/beyond_host.py [--pairs 1000]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
from servebench.trends.nightly import beyond_host

BEYOND = (1.0, 1.3, 1.5)


def pair(seed: int, beyond: float, *, host: float, before: int, after: int, launch: float,
         host_sd: float) -> float | None:
    rng = np.random.default_rng(seed)
    n = before + after
    shared = np.exp(rng.normal(0, host_sd, n))
    shared[before:] *= host
    victim = 2.0 * shared * np.exp(rng.normal(0, launch, n))
    victim[before:] *= beyond
    sibling = 3.0 * shared * np.exp(rng.normal(0, launch, n))
    nights = np.arange(n)
    return beyond_host(pd.DataFrame({"night": nights, "value": victim}),
                       [pd.DataFrame({"night": nights, "value": sibling})], before)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--before", type=int, default=14)
    ap.add_argument("--after", type=int, default=3)
    args = ap.parse_args()
    rows = (("seeds 0-", 0, 1.3, 0.09, 0.14), ("seeds 20000-", 20_000, 1.3, 0.09, 0.14),
            ("seeds 30000-", 30_000, 1.4, 0.12, 0.20))
    print("| seeds | host move | launch | host sd | null called its own | "
          + " | ".join(f"+{b - 1:.0%} beyond caught (median said)" for b in BEYOND[1:]) + " |")
    print("|---|---:|---:|---:|---:|" + "---:|" * (len(BEYOND) - 1))
    for name, first, host, launch, host_sd in rows:
        out = []
        for beyond in BEYOND:
            said = [pair(seed, beyond, host=host, before=args.before, after=args.after,
                         launch=launch, host_sd=host_sd)
                    for seed in range(first, first + args.pairs)]
            caught = [m for m in said if m is not None and m > 0]
            share = len(caught) / args.pairs
            out.append(f"{share:.1%}" if beyond == 1.0 else
                       f"{share:.0%} ({np.median(caught):+.0%})" if caught else f"{share:.0%}")
        print(f"| {name}{first + args.pairs - 1} | {host - 1:+.0%} | {launch:.0%} | "
              f"{host_sd:.0%} | " + " | ".join(out) + " |")


if __name__ == "__main__":
    main()
