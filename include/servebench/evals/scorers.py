"""Scorers: one function per way of checking an answer, found by name in a registry.

A scorer takes (answer, reference) and returns a score in [0, 1]. Whether a score counts as
*correct* is the scorer's ``pass_threshold`` (default 1.0): callers must ask
``is_correct(scorer_name, score)`` rather than compare with 1.0 themselves.

Each registry entry may also carry a ``validate`` hook that checks a *reference* before any
request is sent (a regex that does not compile, a JSON Schema that is not a schema, a judge
that is not configured). The golden-set loader calls ``validate_reference(scorer, reference)``
on every item and turns a returned message into a load-time error naming the line.

A scorer that cannot score an answer for a reason that is not the answer's fault (the LLM
judge is unreachable or replies with a malformed verdict) raises ``ScorerError``;
``score_answer`` turns that into score 0, not correct, with the reason recorded.

Built-in scorers (``reference`` means the golden item's ``reference`` field):

``exact``             stripped answer == stripped reference.
``normalized_exact``  equal after lower-casing, dropping ASCII punctuation, collapsing spaces.
``numeric``           the first number in the answer equals the reference number. The reference
                      is ``"<value>"`` (relative tolerance 1e-6) or ``"<value>±<tol>"`` /
                      ``"<value>+-<tol>"`` (absolute tolerance ``tol``, inclusive), e.g.
                      ``"3.14±0.01"``.
``contains``          the normalized reference occurs in the normalized answer.
``regex``             the reference is a Python regex that must ``fullmatch`` the *stripped*
                      answer (use inline flags such as ``(?i)`` or ``(?s)`` if needed).
``token_f1``          SQuAD-style token F1 after normalization (Unicode case-fold, punctuation
                      and the articles a/an/the removed); the score is the F1, and an item is
                      correct only at F1 == 1.0 (``pass_threshold`` 1.0).
``json_schema``       the reference is a JSON Schema (as a JSON string); the answer, stripped
                      and with an optional surrounding ```` ```json ```` fence removed, must parse
                      as JSON and validate against it. Formats (``"format"``) are not asserted.
``judge``             an LLM judge through an OpenAI-compatible endpoint (``evals/judge.py``).
"""

from __future__ import annotations

import json
import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from servebench.errors import ScorerError

Scorer = Callable[[str, str], float]
Validator = Callable[[str], "str | None"]


@dataclass(frozen=True)
class ScorerEntry:
    name: str
    fn: Scorer
    pass_threshold: float = 1.0
    validate: Validator | None = None  # reference -> error message, or None when usable


@dataclass(frozen=True)
class ScoreResult:
    score: float
    correct: bool
    error: str | None = None  # why the scorer could not score (ScorerError), else None


_SCORERS: dict[str, ScorerEntry] = {}


def register_scorer(
    name: str, *, pass_threshold: float = 1.0, validate: Validator | None = None
) -> Callable[[Scorer], Scorer]:
    if not 0.0 < pass_threshold <= 1.0:
        raise ValueError(f"scorer {name!r}: pass_threshold must be in (0, 1], not {pass_threshold}")

    def wrap(fn: Scorer) -> Scorer:
        _SCORERS[name] = ScorerEntry(name, fn, pass_threshold, validate)
        return fn

    return wrap


def _entry(name: str) -> ScorerEntry:
    try:
        return _SCORERS[name]
    except KeyError:
        raise KeyError(f"unknown scorer {name!r}; known: {known_scorers()}") from None


def get_scorer(name: str) -> Scorer:
    return _entry(name).fn


def known_scorers() -> list[str]:
    return sorted(_SCORERS)


def pass_threshold(name: str) -> float:
    return _entry(name).pass_threshold


def is_correct(scorer_name: str, score: float) -> bool:
    """Whether ``score`` from scorer ``scorer_name`` counts as a correct answer."""
    return not math.isnan(score) and score >= _entry(scorer_name).pass_threshold


def validate_reference(scorer: str, reference: str) -> str | None:
    """An error message if ``reference`` cannot be used with ``scorer`` (or the scorer is
    unknown or unconfigured), else None. Cheap; meant for golden-set load / plan time."""
    entry = _SCORERS.get(scorer)
    if entry is None:
        return f"unknown scorer {scorer!r}; known: {known_scorers()}"
    if entry.validate is None:
        return None
    return entry.validate(reference)


def score_answer(scorer: str, answer: str, reference: str) -> ScoreResult:
    """Score one answer; a ``ScorerError`` becomes score 0 (not correct) with its reason."""
    try:
        score = float(get_scorer(scorer)(answer, reference))
    except ScorerError as exc:
        return ScoreResult(0.0, False, f"scorer {scorer}: {exc}")
    return ScoreResult(score, is_correct(scorer, score))


# --------------------------------------------------------------------------- simple matches


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


@register_scorer("contains")
def contains(answer: str, reference: str) -> float:
    return float(_normalize(reference) in _normalize(answer))


# --------------------------------------------------------------------------- numeric

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_TOLERANCE = re.compile(r"^\s*(?P<value>[^±]+?)\s*(?:±|\+-|\+/-)\s*(?P<tol>[^±]+?)\s*$")


def _parse_numeric_reference(reference: str) -> tuple[float, float | None]:
    """(value, absolute tolerance or None) from ``"v"`` or ``"v±tol"`` / ``"v+-tol"``."""
    match = _TOLERANCE.match(reference)
    if match is None:
        value, tol = float(reference), None
    else:
        value, tol = float(match["value"]), float(match["tol"])
        if not tol >= 0 or math.isinf(tol):
            raise ValueError(f"tolerance must be a finite number >= 0, not {match['tol']!r}")
    if not math.isfinite(value):
        raise ValueError(f"reference value must be finite, not {reference!r}")
    return value, tol


def _validate_numeric(reference: str) -> str | None:
    try:
        _parse_numeric_reference(reference)
    except ValueError as exc:
        return (f"numeric reference {reference!r} is not '<number>' or '<number>±<tolerance>' "
                f"({exc})")
    return None


@register_scorer("numeric", validate=_validate_numeric)
def numeric(answer: str, reference: str, rel_tol: float = 1e-6) -> float:
    """The first number in the answer equals the reference number.

    ``"3.14"``: within ``rel_tol`` x max(1, |3.14|); ``"3.14±0.01"`` (or ``"3.14+-0.01"``):
    within the absolute tolerance 0.01, inclusive.
    """
    match = _NUMBER.search(answer)
    if match is None:
        return 0.0
    want, tol = _parse_numeric_reference(reference)
    if tol is None:
        tol = rel_tol * max(1.0, abs(want))
    # a tiny slack so "3.15" passes "3.14±0.01" despite binary floating point
    return float(abs(float(match.group()) - want) <= tol + 1e-12 * max(1.0, abs(want)))


# --------------------------------------------------------------------------- regex


@lru_cache(maxsize=1024)
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _validate_regex(reference: str) -> str | None:
    try:
        _compile(reference)
    except re.error as exc:
        return f"regex reference {reference!r} does not compile: {exc}"
    return None


@register_scorer("regex", validate=_validate_regex)
def regex(answer: str, reference: str) -> float:
    """The reference regex ``fullmatch``-es the answer stripped of surrounding whitespace."""
    return float(_compile(reference).fullmatch(answer.strip()) is not None)


# --------------------------------------------------------------------------- token F1

_ARTICLES = frozenset({"a", "an", "the"})


def _f1_tokens(text: str) -> list[str]:
    """SQuAD normalization, Unicode-aware: NFKC, case-fold, punctuation -> space, no articles."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text)
    return [tok for tok in text.split() if tok not in _ARTICLES]


@register_scorer("token_f1", pass_threshold=1.0)
def token_f1(answer: str, reference: str) -> float:
    """Token-level F1 between answer and reference (SQuAD); two empty token lists score 1."""
    got, want = _f1_tokens(answer), _f1_tokens(reference)
    if not got or not want:
        return float(got == want)
    common = sum((Counter(got) & Counter(want)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(got), common / len(want)
    return 2 * precision * recall / (precision + recall)


# --------------------------------------------------------------------------- JSON Schema

_FENCE = re.compile(r"^```(?:json)?\s*(?P<body>.*?)\s*```$", re.DOTALL | re.IGNORECASE)


def strip_json_fence(text: str) -> str:
    """The text stripped, without one surrounding ```` ``` ```` / ```` ```json ```` fence."""
    text = text.strip()
    match = _FENCE.match(text)
    return match["body"].strip() if match else text


@lru_cache(maxsize=256)
def _schema_validator(reference: str) -> Any:
    import jsonschema  # imported late: only golden sets that use json_schema need it

    schema = json.loads(reference)
    if not isinstance(schema, dict | bool):
        raise TypeError(f"a JSON Schema is an object or a boolean, not {type(schema).__name__}")
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _validate_json_schema(reference: str) -> str | None:
    from jsonschema.exceptions import SchemaError

    try:
        _schema_validator(reference)
    except json.JSONDecodeError as exc:
        return f"json_schema reference is not valid JSON: {exc.msg} (char {exc.pos})"
    except TypeError as exc:
        return f"json_schema reference: {exc}"
    except SchemaError as exc:
        return f"json_schema reference is not a valid JSON Schema: {exc.message}"
    return None


@register_scorer("json_schema", validate=_validate_json_schema)
def json_schema(answer: str, reference: str) -> float:
    """The answer (optionally fenced) parses as JSON and validates against the reference."""
    validator = _schema_validator(reference)
    try:
        document = json.loads(strip_json_fence(answer))
    except json.JSONDecodeError:
        return 0.0
    return float(validator.is_valid(document))
