"""Scorers: one function per way of checking an answer, found by name in a registry.

A scorer takes (answer, reference) and returns a score in [0, 1]; 1.0 counts as correct.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable

Scorer = Callable[[str, str], float]
_SCORERS: dict[str, Scorer] = {}


def register_scorer(name: str) -> Callable[[Scorer], Scorer]:
    def wrap(fn: Scorer) -> Scorer:
        _SCORERS[name] = fn
        return fn

    return wrap


def get_scorer(name: str) -> Scorer:
    try:
        return _SCORERS[name]
    except KeyError:
        raise KeyError(f"unknown scorer {name!r}; known: {known_scorers()}") from None


def known_scorers() -> list[str]:
    return sorted(_SCORERS)


def _normalize(text: str) -> str:
    text = text.lower().strip()
    text = text.translate(str.maketrans("", "", string.punctuation))
    return " ".join(text.split())


@register_scorer("exact")
def exact(answer: str, reference: str) -> float:
    """The answer, stripped of surrounding whitespace, equals the reference."""
    return float(answer.strip() == reference.strip())


@register_scorer("normalized_exact")
def normalized_exact(answer: str, reference: str) -> float:
    """Equal after lower-casing, dropping punctuation and collapsing whitespace."""
    return float(_normalize(answer) == _normalize(reference))


_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


@register_scorer("numeric")
def numeric(answer: str, reference: str, rel_tol: float = 1e-6) -> float:
    """The first number in the answer equals the reference number (relative tolerance)."""
    match = _NUMBER.search(answer)
    if match is None:
        return 0.0
    got, want = float(match.group()), float(reference)
    return float(abs(got - want) <= rel_tol * max(1.0, abs(want)))


@register_scorer("contains")
def contains(answer: str, reference: str) -> float:
    return float(_normalize(reference) in _normalize(answer))
