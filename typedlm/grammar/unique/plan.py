"""Where a core-form schema asks for unique arrays: instance locations and the schemas each may match.

A :class:`Loc` is one place in an instance (the root, an object's value under a key, an array's item at
an index), described by the core-form schemas a value there may match (``anyOf`` and ``$ref`` expanded;
where a key or index is not told apart, the union of the candidates: a superset). An array there must
have distinct items when every alternative that admits an array with two equal items says
``uniqueItems`` — then the guard enforcing it accepts exactly what the schema accepts. Where one
alternative says ``uniqueItems`` and another admits repeats, no decode-time check is exact: the schema
is refused (:func:`unique_plan` walks every reachable location at compile time, so a row never meets
such a place).
"""

from __future__ import annotations

from ...errors import GrammarCompileError
from ..schema.branches import same
from ..schema.ir import Contains, KeyClasses, ir_of

MAX_LOCATIONS = 4096  # distinct locations a plan may walk; past it the schema is refused
ANY: dict = {}
OTHER = object()  # an object key that no core-form schema lists


class Plan:
    """The locations of one core form (built lazily, memoized by their schema sets)."""

    def __init__(self, core: dict):
        self.defs = core.get("$defs", {}) if isinstance(core, dict) else {}
        self.keep: list = []  # schemas made here (enum parts), alive while the plan is
        self._locs: dict[tuple, Loc] = {}
        self.root = self.loc(self.expand(core))

    def expand(self, node, seen: frozenset = frozenset()) -> list:
        """The alternatives of ``node``: ``anyOf`` members, ``allOf`` members (a superset), ``$ref`` targets."""
        if node is True:
            return [ANY]
        if node is False or not isinstance(node, dict):
            return []
        if "$ref" in node:
            name = str(node["$ref"]).rsplit("/", 1)[-1]
            return [] if name in seen or name not in self.defs else self.expand(self.defs[name], seen | {name})
        for kw in ("anyOf", "allOf"):
            if kw in node:
                return [x for m in node[kw] for x in self.expand(m, seen)]
        return [node]

    def loc(self, schemas: list) -> "Loc":
        key = tuple(sorted({id(s): s for s in schemas}))
        if key not in self._locs:
            if len(self._locs) >= MAX_LOCATIONS:
                raise GrammarCompileError(f"uniqueItems: the schema has more than {MAX_LOCATIONS} places to check",
                                          keyword="uniqueItems", pointer="/")
            self._locs[key] = Loc(self, list({id(s): s for s in schemas}.values()))
        return self._locs[key]

    def made(self, schema: dict) -> dict:
        self.keep.append(schema)
        return schema


def _arrays(s: dict) -> bool:
    t = s.get("type")
    return t is None or t == "array" or (isinstance(t, list) and "array" in t)


def _objects(s: dict) -> bool:
    t = s.get("type")
    return t is None or t == "object" or (isinstance(t, list) and "object" in t)


def _values_of(s: dict) -> list:
    """An enum/const schema's values ([] for any other schema)."""
    return s["enum"] if "enum" in s else [s["const"]] if "const" in s else []


def _distinct(values: list) -> bool:
    return all(not same(x, y) for i, x in enumerate(values) for y in values[i + 1:])


class Loc:
    """One instance location: ``unique`` (an array here must have distinct items), ``item(i)``, ``child(key)``."""

    def __init__(self, plan: Plan, schemas: list):
        self.plan, self.schemas = plan, schemas
        self._kids: dict = {}
        self._small: bool | None = None
        self._listed = {k for s in schemas for k in _listed(s)}  # keys some schema here names
        says, repeats = False, False
        for s in schemas:
            if "enum" in s or "const" in s:
                repeats |= any(isinstance(v, list) and not _distinct(v) for v in _values_of(s))
            elif _arrays(s):
                if s.get("uniqueItems") is True:
                    says = True
                elif s.get("maxItems", 2) > 1:
                    repeats = True
        self.unique, self.mixed = says and not repeats, says and repeats

    def item(self, i: int) -> "Loc":
        key = ("i", min(i, self._prefix_len()))
        if key not in self._kids:
            out = []
            for s in self.schemas:
                if "enum" in s or "const" in s:
                    vals = [v[i] for v in _values_of(s) if isinstance(v, list) and len(v) > i]
                    out += [self.plan.made({"enum": vals})] if vals else []
                elif _arrays(s):
                    pre = s.get("prefixItems", [])
                    sub = ANY if isinstance(ir_of(s), Contains) else pre[i] if i < len(pre) else s.get("items", True)
                    out += self.plan.expand(sub)
            self._kids[key] = self.plan.loc(out)
        return self._kids[key]

    def _prefix_len(self) -> int:
        return max([len(s.get("prefixItems", [])) for s in self.schemas] +
                   [len(v) for s in self.schemas for v in _values_of(s) if isinstance(v, list)] + [0])

    def child(self, key) -> "Loc":
        key = key if key in self._listed else OTHER
        if key not in self._kids:
            out = []
            for s in self.schemas:
                if "enum" in s or "const" in s:
                    vals = [v[key] for v in _values_of(s) if isinstance(v, dict) and key is not OTHER and key in v]
                    out += [self.plan.made({"enum": vals})] if vals else []
                elif _objects(s):
                    out += [x for sub in _values(s, key) for x in self.plan.expand(sub)]
            self._kids[key] = self.plan.loc(out)
        return self._kids[key]

    def small(self, depth: int = 0) -> bool:
        """Whether values here come from a small space (enums, booleans, null, bounded integers, strings of at
        most 3 characters, objects and bounded arrays of such): where the guard's look-ahead may use it up."""
        if depth > 4:
            return False
        if self._small is None:
            self._small = self._all_small(depth)
        return self._small

    def _all_small(self, depth: int) -> bool:
        for s in self.schemas:
            t = s.get("type")
            if "enum" in s or "const" in s or t in ("boolean", "null"):
                continue
            if t == "integer" and "minimum" in s and "maximum" in s and s["maximum"] - s["minimum"] <= 64:
                continue
            if t == "string" and s.get("maxLength", 4) <= 3:
                continue
            if t == "object" and all(self.child(k).small(depth + 1) for k in _listed(s)):
                continue
            if t == "array" and "maxItems" in s and self.item(0).small(depth + 1):
                continue
            return False
        return True

    def keys(self) -> list:
        return [k for s in self.schemas for k in _listed(s)] + [OTHER]


def _listed(s: dict) -> list:
    if "enum" in s or "const" in s:
        return [k for v in _values_of(s) if isinstance(v, dict) for k in v]
    return list(s.get("properties", {})) + [x.name for x in _classes(s).listed]


def _values(s: dict, key) -> list:
    """The schemas a value under ``key`` may match in object schema ``s`` (a superset for an unlisted key)."""
    spec = _classes(s)
    if key is not OTHER:
        props = s.get("properties", {})
        return ([props[key]] if key in props else []) + [x.value if x.value is not None else False
                                                         for x in spec.listed if x.name == key]
    return (list(s.get("patternProperties", {}).values()) + [s.get("additionalProperties", True)]
            + [x.value for x in spec.others])


def _classes(s: dict) -> KeyClasses:
    """The key classes of object schema ``s`` (:class:`..schema.ir.KeyClasses`; none: empty)."""
    ir = ir_of(s)
    return ir if isinstance(ir, KeyClasses) else KeyClasses((), ())


def has_unique(core) -> bool:
    """Whether a core form says ``uniqueItems`` anywhere (only then a row needs the guard)."""
    if isinstance(core, dict):
        return core.get("uniqueItems") is True or any(has_unique(v) for k, v in core.items() if k != "enum")
    if isinstance(core, list):
        return any(has_unique(v) for v in core)
    return False


def unique_plan(core: dict) -> Plan:
    """The plan of ``core``, every reachable location checked; GrammarCompileError (keyword ``uniqueItems``)
    where one alternative asks for distinct items and another admits repeats (no exact check exists)."""
    plan = Plan(core)
    todo, done = [(plan.root, "")], set()
    while todo:
        loc, path = todo.pop()
        if id(loc) in done:
            continue
        done.add(id(loc))
        if loc.mixed:
            raise GrammarCompileError(f"uniqueItems at instance location {path or '/'}: another alternative there "
                                      "allows repeated items, so no decode-time check is exact",
                                      keyword="uniqueItems", pointer=path or "/")
        todo += [(loc.item(i), f"{path}/{i}") for i in range(loc._prefix_len() + 1)]
        todo += [(loc.child(k), f"{path}/{'*' if k is OTHER else k}") for k in dict.fromkeys(loc.keys())]
    return plan
