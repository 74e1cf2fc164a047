"""The constraint vocabulary of decision schemas: atoms, cross-field constraints, and the Pydantic
markers (``Annotated[list[Tag], MaxSelected(2)]``) that state them on a model's fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable


@dataclass(frozen=True)
class Atom:
    field: str
    values: tuple[str, ...]  # booleans: "true" / "false"

    def describe(self) -> str:
        vs = self.values[0] if len(self.values) == 1 else list(self.values)
        return f"{self.field} in {vs}" if len(self.values) > 1 else f"{self.field} = {vs}"


@dataclass(frozen=True)
class Implies:
    when: Atom
    then: Atom

    def to_dict(self) -> dict:
        return {"if": _atom_dict(self.when), "then": _atom_dict(self.then)}

    def describe(self) -> str:
        return f"if {self.when.describe()} then {self.then.describe()}"

    @property
    def atoms(self) -> tuple[Atom, ...]:
        return (self.when, self.then)


@dataclass(frozen=True)
class Excludes:
    atoms: tuple[Atom, ...]  # not all of them at once

    def to_dict(self) -> dict:
        out: dict = {}
        for a in self.atoms:
            out.update(_atom_dict(a))
        return {"excludes": out}

    def describe(self) -> str:
        return "not (" + " and ".join(a.describe() for a in self.atoms) + ")"


def _atom_dict(a: Atom) -> dict:
    vals = [_json_value(v) for v in a.values]
    return {a.field: vals[0] if len(vals) == 1 else vals}


def _json_value(v: str) -> Any:
    return {"true": True, "false": False}.get(v, v) if v in ("true", "false") else v


# -- Pydantic markers (``Annotated[list[Tag], MaxSelected(2)]``) -------------------------------------
@dataclass(frozen=True)
class MinSelected:
    n: int

    def spec(self) -> dict:
        return {"min_selected": self.n}


@dataclass(frozen=True)
class MaxSelected:
    n: int

    def spec(self) -> dict:
        return {"max_selected": self.n}


@dataclass(frozen=True)
class Exactly:
    n: int

    def spec(self) -> dict:
        return {"exactly": self.n}


class Exclusive:
    """At most one of these options is selected."""

    def __init__(self, *options: Any):
        self.options = [getattr(o, "value", o) for o in options]

    def spec(self) -> dict:
        return {"exclusive": [self.options]}


class Requires:
    """Selecting ``option`` requires selecting every one of ``needs``."""

    def __init__(self, option: Any, *needs: Any):
        self.option = getattr(option, "value", option)
        self.needs = [getattr(o, "value", o) for o in needs]

    def spec(self) -> dict:
        return {"requires": {self.option: self.needs}}


class DependsOn:
    """Decide this field after ``parents``, with their values given in the prompt."""

    def __init__(self, *parents: str):
        self.parents = list(parents)

    def spec(self) -> dict:
        return {"depends_on": self.parents}


MARKERS = (MinSelected, MaxSelected, Exactly, Exclusive, Requires, DependsOn)


def merge_specs(specs: Iterable[dict]) -> dict:
    """Field-spec keys from several markers (``exclusive`` lists and ``requires`` maps accumulate)."""
    out: dict = {}
    for s in specs:
        for k, v in s.items():
            if k == "exclusive":
                out.setdefault(k, []).extend(v)
            elif k == "requires":
                out.setdefault(k, {}).update(v)
            elif k == "depends_on":
                out.setdefault(k, []).extend(v)
            else:
                out[k] = v
    return out

