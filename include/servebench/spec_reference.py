"""The sweep spec's reference: every field as a Markdown table read off the models themselves.
docs/spec-reference.md holds this text (a test keeps them equal) and ``servebench
spec-reference`` prints it for the installed version."""

from __future__ import annotations

import json
import types
import typing
from typing import Annotated, Literal

from pydantic import BaseModel

from servebench.config import STACK_OPTIONS, SweepSpec, VariantOptions, VariantSpec


def spec_reference() -> str:
    """Every field of a sweep spec as a Markdown table (path, type, default, what it is), read
    off the models themselves: docs/spec-reference.md is this text (a test keeps them equal),
    and
    ``servebench spec-reference`` prints it for the installed version."""
    rows: list[tuple[str, str, str, str]] = []
    # a variant knob not every stack takes says which do
    takers = {name: [st for st in sorted(STACK_OPTIONS)
                      if name in STACK_OPTIONS[st].model_fields]
              for name in VariantSpec.model_fields if name not in VariantOptions.model_fields}

    def walk(model: type[BaseModel], prefix: str, union: bool = False) -> None:
        for name, field in model.model_fields.items():
            if union and name == "kind":
                continue  # its row is the member's own
            if field.exclude:
                continue  # the runtime's (the plan sets it), never written in a spec
            path = f"{prefix}{name}"
            members = _models_in(field.annotation)
            if field.is_required():
                default = "required"
            else:
                value = field.get_default(call_default_factory=True)
                default = ("" if isinstance(value, BaseModel)
                           else json.dumps(value) if value is not None else "none")
            about = (field.description or "").replace("|", "\\|")
            if model is VariantSpec and name in takers:
                about = f"({', '.join(takers[name])}) {about}".rstrip()
            if members and len(members) == 1:
                rows.append((path, _type_name(field.annotation), default,
                             about or _first_line(members[0].__doc__)))
                walk(members[0], f"{path}{'[].' if _is_list(field.annotation) else '.'}")
            elif members:  # a union told apart by `kind`
                for member in members:
                    kind = member.model_fields["kind"].annotation.__args__[0]
                    rows.append((f"{path} (kind: {kind})", _type_name(member), default,
                                 _first_line(member.__doc__)))
                    walk(member, f"{path}{'[].' if _is_list(field.annotation) else '.'}",
                         union=True)
            else:
                rows.append((path, _type_name(field.annotation), default, about))

    walk(SweepSpec, "")
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    lines += [" | ".join(["", f"`{p}`", _cell(t), _cell(d), a, ""]).strip()
              for p, t, d, a in rows]
    return "\n".join(lines) + "\n"


def _type_name(annotation) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in args)}]"
    return "None" if annotation is type(None) else getattr(annotation, "__name__",
                                                           str(annotation))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _first_line(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split()).replace("|", "\\|")


def _is_list(annotation) -> bool:
    return typing.get_origin(annotation) is list


def _models_in(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (a model, a list of them, an optional one, a
    union of them)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += [m for m in _models_in(arg) if m not in found]
    return found
