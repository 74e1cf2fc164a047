"""Decision schemas: boolean / enum / multi fields, built from a JSON dict or a Pydantic model.

Immutable once built; every problem is caught at construction and raised as :class:`SchemaError`
naming the field and what is wrong. Tokenizer-dependent checks (choices that tokenize identically)
happen when a plan is compiled (:mod:`typedlm.decide.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import enum
import json
import re
import types
import typing
from typing import Any

from pydantic import BaseModel

from ..errors import SchemaError
from ..grammar.spec import canonical_json
from .constraints.depends import waves
from .constraints.parse import check as check_constraints, parse_cross, parse_field_constraints
from .constraints.terms import MARKERS, merge_specs

FIELD_TYPES = ("boolean", "enum", "multi")
FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
FIELD_KEYS = {"type", "description", "choices", "ordered", "nullable", "depends_on", "min_selected", "max_selected",
              "exactly", "exclusive", "requires"}
TOP_KEYS = {"fields", "description", "title", "constraints", "examples"}
MAX_EXAMPLES = 16
MAX_CHOICES = 256
MAX_CHOICE_CHARS = 200


@dataclass(frozen=True)
class Choice:
    value: str
    description: str | None = None


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # "boolean" | "enum" | "multi"
    description: str
    choices: tuple[Choice, ...] = ()  # enum / multi; booleans have none
    ordered: bool = False  # enum only: a score-like scale, lowest first
    nullable: bool = True  # may abstain (value None): dict schemas yes unless "nullable": false; pydantic: X | None
    depends_on: tuple[str, ...] = ()  # decided after these fields, with their values given in the prompt
    min_selected: int = 0  # multi only (constraints.py): bounds on the number of selected options
    max_selected: int = 0  # multi: defaults to the number of options
    exclusive: tuple = ()  # multi: groups of options of which at most one is selected
    requires: tuple = ()  # multi: (option, (options it needs, ...))

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(c.value for c in self.choices)


@dataclass(frozen=True)
class DecisionSchema:
    fields: tuple[Field, ...]
    description: str | None = None
    constraints: tuple = ()  # cross-field constraints.Implies / Excludes
    model: Any = field(default=None, compare=False)  # the Pydantic class it came from, if any
    key: str = ""  # canonical JSON of to_dict(): the plan-cache key
    examples: tuple = ()  # few-shot ((context, {field: value}), ...): rendered into the shared prompt prefix

    def __getitem__(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def to_dict(self) -> dict:
        out: dict = {"fields": {}}
        if self.description:
            out["description"] = self.description
        for f in self.fields:
            d: dict = {"type": f.type, "description": f.description}
            if f.choices:
                if any(c.description for c in f.choices):
                    d["choices"] = {c.value: c.description or "" for c in f.choices}
                else:
                    d["choices"] = list(f.values)
            if f.ordered:
                d["ordered"] = True
            if not f.nullable:
                d["nullable"] = False
            if f.depends_on:
                d["depends_on"] = list(f.depends_on)
            if f.type == "multi":
                if f.min_selected:
                    d["min_selected"] = f.min_selected
                if f.max_selected < len(f.choices):
                    d["max_selected"] = f.max_selected
                if f.exclusive:
                    d["exclusive"] = [list(g) for g in f.exclusive]
                if f.requires:
                    d["requires"] = {a: list(need) for a, need in f.requires}
            out["fields"][f.name] = d
        if self.constraints:
            out["constraints"] = [c.to_dict() for c in self.constraints]
        if self.examples:
            out["examples"] = [{"context": c, "labels": {n: list(v) if isinstance(v, tuple) else v for n, v in labels}}
                               for c, labels in self.examples]
        return out

    def subset(self, names: tuple[str, ...]) -> "DecisionSchema":
        """The fields ``names`` alone, without dependencies and constraints (what one ``depends_on`` wave
        scores; questions are compiled per field, so its plan's questions are the full plan's)."""
        spec = self.to_dict()
        drop = ("depends_on", "min_selected", "max_selected", "exclusive", "requires")
        fields = {n: {k: v for k, v in spec["fields"][n].items() if k not in drop} for n in names}
        examples = [{"context": e["context"], "labels": {n: v for n, v in e["labels"].items() if n in names}}
                    for e in spec.get("examples", [])]
        return DecisionSchema.from_dict({"fields": fields, **({"description": self.description}
                                                               if self.description else {}),
                                         **({"examples": examples} if examples else {})})

    @property
    def constrained(self) -> bool:
        return bool(self.constraints) or any(
            f.min_selected or f.max_selected < len(f.choices) or f.exclusive or f.requires
            for f in self.fields if f.type == "multi")

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def coerce(cls, spec: Any) -> "DecisionSchema":
        """A DecisionSchema from a DecisionSchema, a Pydantic model class, a dict or a JSON string."""
        if isinstance(spec, DecisionSchema):
            return spec
        if isinstance(spec, type):
            return cls.from_model(spec)
        if isinstance(spec, (str, bytes)):
            try:
                spec = json.loads(spec)
            except json.JSONDecodeError as e:
                raise SchemaError(f"schema is not valid JSON: {e}") from e
        if isinstance(spec, dict):
            return cls.from_dict(spec)
        raise SchemaError(f"schema must be a dict, a JSON string or a Pydantic model class, got {type(spec).__name__}")

    @classmethod
    def from_dict(cls, spec: dict, *, model: Any = None) -> "DecisionSchema":
        if not isinstance(spec, dict):
            raise SchemaError(f"schema must be a JSON object, got {type(spec).__name__}")
        extra = sorted(set(spec) - TOP_KEYS)
        if extra:
            raise SchemaError(f"schema has unknown key(s) {', '.join(map(repr, extra))}: use {sorted(TOP_KEYS)}")
        fields = spec.get("fields")
        if not isinstance(fields, dict) or not fields:
            raise SchemaError("schema needs a non-empty object 'fields' mapping field name -> field spec")
        desc = spec.get("description")
        if desc is not None and not isinstance(desc, str):
            raise SchemaError("schema 'description' must be a string")
        built = tuple(_field(name, fs) for name, fs in fields.items())
        by_name = {f.name: f for f in built}
        cross = parse_cross(spec.get("constraints"), by_name)
        examples = _examples(spec.get("examples"), by_name)
        tmp = cls(fields=built, description=desc or None, constraints=cross, model=model, examples=examples)
        waves(tmp)  # unknown parents and cycles are refused here
        check_constraints(tmp)  # unsatisfiable sets are refused here, naming the conflicting constraints
        return cls(fields=built, description=desc or None, constraints=cross, model=model,
                   key=canonical_json(tmp.to_dict()), examples=examples)

    @classmethod
    def from_model(cls, model: type) -> "DecisionSchema":
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise SchemaError(f"{getattr(model, '__name__', model)!r} is not a Pydantic model class")
        fields: dict = {}
        for name, info in model.model_fields.items():
            fields[name] = _field_from_annotation(name, info)
        doc = (model.__doc__ or "").strip() or None
        if doc and doc.startswith(f"{model.__name__}("):  # pydantic's generated docstring is not a description
            doc = None
        cross = getattr(model, "decision_constraints", None)
        extra = model.model_config.get("json_schema_extra")
        examples = extra.get("examples") if isinstance(extra, dict) else None
        return cls.from_dict({"fields": fields, **({"description": doc} if doc else {}),
                              **({"constraints": list(cross)} if cross else {}),
                              **({"examples": examples} if examples else {})}, model=model)


def _field(name: Any, fs: Any) -> Field:
    if not isinstance(name, str) or not FIELD_NAME.match(name):
        raise SchemaError(f"bad field name {name!r}: use letters, digits and '_' (not first a digit), at most 64")
    where = f"field '{name}'"
    if not isinstance(fs, dict):
        raise SchemaError(f"{where}: spec must be an object, got {type(fs).__name__}")
    extra = sorted(set(fs) - FIELD_KEYS)
    if extra:
        raise SchemaError(f"{where}: unknown key(s) {', '.join(map(repr, extra))}; allowed: {sorted(FIELD_KEYS)}")
    ftype = fs.get("type")
    if ftype not in FIELD_TYPES:
        raise SchemaError(f"{where}: 'type' must be one of {', '.join(FIELD_TYPES)}, got {ftype!r}")
    desc = fs.get("description")
    if not isinstance(desc, str) or not desc.strip():
        raise SchemaError(f"{where}: needs a non-empty 'description' (the question the model answers)")
    ordered = fs.get("ordered", False)
    nullable = fs.get("nullable", True)
    deps = fs.get("depends_on", [])
    deps = [deps] if isinstance(deps, str) else deps
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise SchemaError(f"{where}: 'depends_on' must be a field name or a list of field names")
    if len(set(deps)) != len(deps):
        raise SchemaError(f"{where}: 'depends_on' repeats a field")
    deps = tuple(deps)
    for k, v in (("ordered", ordered), ("nullable", nullable)):
        if not isinstance(v, bool):
            raise SchemaError(f"{where}: '{k}' must be true or false")
    if ordered and ftype != "enum":
        raise SchemaError(f"{where}: 'ordered' applies to enum fields only")
    if ftype == "boolean":
        if "choices" in fs:
            raise SchemaError(f"{where}: boolean fields take no 'choices' (they are true / false)")
        parse_field_constraints(where, ftype, fs, ())
        return Field(name, ftype, desc.strip(), (), False, nullable, deps)
    choices = _choices(where, fs.get("choices"))
    if ftype == "enum" and len(choices) < 2:
        raise SchemaError(f"{where}: an enum needs at least 2 choices, got {len(choices)}")
    cons = parse_field_constraints(where, ftype, fs, tuple(c.value for c in choices))
    if ftype != "multi":
        cons = {}
    return Field(name, ftype, desc.strip(), choices, ordered, nullable, deps, **cons)


def _examples(raw: Any, fields: dict) -> tuple:
    """``examples``: [{"context": text, "labels": {field: value}}] -> ((context, ((field, value), ...)), ...);
    every label a legal value of its field (multi: a list of distinct options), every field labelled."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_EXAMPLES:
        raise SchemaError(f"'examples' must be a list of at most {MAX_EXAMPLES} objects")
    out = []
    for i, ex in enumerate(raw):
        where = f"examples[{i}]"
        if not isinstance(ex, dict) or set(ex) != {"context", "labels"}:
            raise SchemaError(f"{where}: needs exactly 'context' (text) and 'labels' (field -> value)")
        ctx, labels = ex["context"], ex["labels"]
        if not isinstance(ctx, str) or not ctx.strip():
            raise SchemaError(f"{where}: 'context' must be a non-empty string")
        if not isinstance(labels, dict) or set(labels) != set(fields):
            raise SchemaError(f"{where}: 'labels' must give every field ({', '.join(fields)}), got {sorted(labels)}")
        for name, v in labels.items():
            f = fields[name]
            ok = isinstance(v, bool) if f.type == "boolean" else v in f.values if f.type == "enum" else \
                isinstance(v, list) and len(set(v)) == len(v) and all(o in f.values for o in v)
            if not ok:
                raise SchemaError(f"{where}: label {v!r} is not a value of field '{name}'")
        out.append((ctx, tuple((n, tuple(labels[n]) if isinstance(labels[n], list) else labels[n])
                               for n in fields)))
    return tuple(out)


def _choices(where: str, raw: Any) -> tuple[Choice, ...]:
    if raw is None:
        raise SchemaError(f"{where}: needs 'choices' (a list of strings or an object choice -> description)")
    if isinstance(raw, dict):
        items = list(raw.items())
    elif isinstance(raw, list):
        items = [(c, None) for c in raw]
    else:
        raise SchemaError(f"{where}: 'choices' must be a list of strings or an object, got {type(raw).__name__}")
    if not items:
        raise SchemaError(f"{where}: 'choices' is empty")
    if len(items) > MAX_CHOICES:
        raise SchemaError(f"{where}: {len(items)} choices; at most {MAX_CHOICES}")
    out, seen = [], set()
    for value, desc in items:
        if not isinstance(value, str):
            raise SchemaError(f"{where}: choice {value!r} is not a string")
        if not value.strip():
            raise SchemaError(f"{where}: empty choice {value!r}")
        if len(value) > MAX_CHOICE_CHARS:
            raise SchemaError(f"{where}: choice {value[:20]!r}... is longer than {MAX_CHOICE_CHARS} characters")
        if value in seen:
            raise SchemaError(f"{where}: duplicate choice {value!r}")
        if desc is not None and not isinstance(desc, str):
            raise SchemaError(f"{where}: description of choice {value!r} must be a string")
        seen.add(value)
        out.append(Choice(value, (desc or "").strip() or None))
    return tuple(out)


# -- Pydantic annotations ----------------------------------------------------------------------------
def _field_from_annotation(name: str, info: Any) -> dict:
    where = f"field '{name}'"
    ann = info.annotation
    nullable = False
    origin = typing.get_origin(ann)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if len(args) != 1 or len(args) == len(typing.get_args(ann)):
            raise SchemaError(f"{where}: only 'X | None' unions are supported, got {ann!r}")
        ann, nullable = args[0], True
    metadata = list(info.metadata)
    if typing.get_origin(ann) is typing.Annotated:  # Annotated[list[X], MaxSelected(2)] | None: markers inside
        ann, *inner = typing.get_args(ann)
        metadata += inner
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    desc = info.description or name.replace("_", " ")
    spec: dict = {"description": desc, "nullable": nullable,
                  **merge_specs(m.spec() for m in metadata if isinstance(m, MARKERS))}
    if "depends_on" in extra:
        spec["depends_on"] = extra["depends_on"]
    if ann is bool:
        spec["type"] = "boolean"
        return spec
    values = _literal_values(where, ann)
    if values is not None:
        spec.update(type="enum", choices=_with_desc(values, extra))
        if extra.get("ordered"):
            spec["ordered"] = True
        return spec
    origin = typing.get_origin(ann)
    if origin in (list, set, frozenset, tuple):
        args = typing.get_args(ann)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise SchemaError(f"{where}: tuples must be tuple[X, ...]")
        inner = _literal_values(where, args[0]) if args else None
        if inner is None:
            raise SchemaError(f"{where}: a multi field is list/set of a Literal or Enum, got {ann!r}")
        spec.update(type="multi", choices=_with_desc(inner, extra))
        return spec
    raise SchemaError(f"{where}: unsupported type {ann!r}: use bool, Literal[...] / Enum, list[Literal[...]] / "
                      "set[Enum], optionally '| None'")


def _literal_values(where: str, ann: Any) -> list[str] | None:
    if typing.get_origin(ann) is typing.Literal:
        vals = list(typing.get_args(ann))
        if not all(isinstance(v, str) for v in vals):
            raise SchemaError(f"{where}: Literal choices must be strings, got {vals!r}")
        return vals
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return [m.value if isinstance(m.value, str) else m.name for m in ann]
    return None


def _with_desc(values: list[str], extra: dict) -> Any:
    descs = extra.get("choices")
    if isinstance(descs, dict):
        return {v: descs.get(v) or "" for v in values}
    return values


def lint(schema: DecisionSchema) -> list[str]:
    """Warnings that are legal but likely mistakes (the errors are raised at construction)."""
    out = []
    for f in schema.fields:
        folded: dict[str, str] = {}
        for v in f.values:
            k = " ".join(v.casefold().split())
            if k in folded:
                out.append(f"field '{f.name}': choices {folded[k]!r} and {v!r} differ only in case or spaces")
            folded.setdefault(k, v)
        if f.type == "multi" and len(f.choices) == 1:
            out.append(f"field '{f.name}': a multi field with one option is a boolean")
        if f.description == f.name.replace("_", " "):
            out.append(f"field '{f.name}': no description (the field name is used as the question)")
    return out
