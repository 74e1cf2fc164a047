"""The normalizer's core form as llguidance's JSON grammar (the schema half of the llguidance backend).

What llguidance gets, and why it is exact: the normalizer stays the single front end (it decides exact /
refused / relaxed) and llguidance reads the *core form* it emits. The core form means exactly the schema
as plain JSON Schema (jsonschema validates outputs against it); its typed nodes (:mod:`..schema.ir`)
only tell our EBNF emitter (:mod:`..schema.ebnf`) how to build rules xgrammar's JSON Schema subset lacks
(lengths beside patterns, key classes, residues), so llguidance reads their standard keywords only (the
grammar layer asks for a core form without the costly ones: ``prepare_schema(automata=False)``) and
llguidance enforces the keywords themselves: it implements ``minLength``/``maxLength`` beside
``pattern`` (regex intersection), escapes counted as one character, ``patternProperties`` exclusions.
Where it lacks one (``contains``, ``not``, ...) it refuses the schema by name (``lenient`` off) and
``auto`` takes xgrammar; ``minProperties``/``maxProperties`` beside optional keys and ``propertyNames``
are rewritten into keywords it reads (:mod:`.llguidance_objects`). Rewrites keep llguidance's reading
equal to ours:

- a ``pattern`` (and a ``patternProperties`` name) is a whole-match ECMA-262 regex in the core form: it is
  anchored ``^(?:..)$`` and its class escapes spelled out; patterns its JSON-string quoting reads wrong
  are declined (:mod:`.llguidance_regex`);
- ``strict`` (xgrammar's ``strict_mode``: no properties or items beyond those listed) becomes
  ``additionalProperties: false`` / ``items: false`` where the node says nothing;
- a ``format`` left to xgrammar's grammar becomes that grammar's regex (:data:`FORMATS`).

Where llguidance differs it is stricter, never looser: no ``\\uXXXX`` escape of a printable character, no
exponent on a bounded number, only the canonical first token of forced text. Checked: the suite ratchets
``tests/data/jsonschema_ratchet/auto`` and ``.../llguidance`` (0 false positives), the fuzzers and
``tests/grammar/test_engines.py`` run both engines.
"""

from __future__ import annotations

import json

from .base import NotForEngine
from .llguidance_objects import counted_object, named_properties
from .llguidance_regex import Declined, check_json_quoting, ecma_classes
from .llguidance_shared import share_repeats


def llg_schema(core, *, strict: bool):
    """The core form as llguidance reads it (module docstring), or NotForEngine."""
    return _adapt(core, strict)


def _adapt(node, strict: bool):
    if isinstance(node, list):
        return [_adapt(x, strict) for x in node]
    if not isinstance(node, dict):
        return node
    if "format" in node:
        node = _format_as_pattern(node)
    out = {}
    for k, v in node.items():
        if k == "uniqueItems":  # uniqueItems: the decode-time guard's (grammar/unique)
            continue
        if k in ("enum", "const"):
            out[k] = v
        elif k == "pattern":
            out[k] = _anchored(v)
        elif k == "patternProperties":
            out[k] = {_anchored(p): _adapt(s, strict) for p, s in v.items()}
        elif k in ("properties", "$defs"):
            out[k] = {name: _adapt(s, strict) for name, s in v.items()}
        else:
            out[k] = _adapt(v, strict)
    if strict and "additionalProperties" not in out and ("properties" in out or out.get("type") == "object"):
        out["additionalProperties"] = False
    if strict and "prefixItems" in out and "items" not in out:
        out["items"] = False
    if "propertyNames" in out:
        out = named_properties(out, _anchored, _declined("propertyNames"))
    return counted_object(out, _declined("minProperties"))


def _declined(keyword: str):
    def decline(reason: str):
        raise NotForEngine(f"llguidance: {reason}", keyword=keyword)
    return decline


# The formats the core form leaves to xgrammar's own grammar, as the same regexes (of the decoded string).
# email: a dot-atom or a quoted local part (printable ASCII, backslash pairs), then xgrammar's host names.
_ATEXT = "[a-zA-Z0-9_!#$%&'*+/=?^`{|}~-]"
_QUOTED = '"([ !#-\\[\\]-~]|\\\\[ -~])*"'
_LABEL_TAIL = "[-A-Za-z0-9]*[A-Za-z0-9]"
FORMATS = {
    "email": f"({_ATEXT}+(\\.{_ATEXT}+)*|{_QUOTED})@[A-Za-z0-9]({_LABEL_TAIL})?(\\.[A-Za-z0-9]{_LABEL_TAIL})*",
    "uuid": "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}",
}


def _format_as_pattern(node: dict) -> dict:
    fmt = node["format"]
    if fmt not in FORMATS or "pattern" in node:
        raise NotForEngine(f"format {fmt!r} is xgrammar's own grammar", keyword="format")
    return {("pattern" if k == "format" else k): (FORMATS[fmt] if k == "format" else v) for k, v in node.items()}


def _anchored(rx: str) -> str:
    if "(?!" in rx:  # a patternProperties name pattern ^(?!X)Y: Rust's regexes have no lookaround
        raise NotForEngine(f"pattern {rx!r}: a lookahead (xgrammar gets its automaton)", keyword="patternProperties")
    try:
        check_json_quoting(rx)
        return f"^(?:{ecma_classes(rx)})$"
    except Declined as e:
        raise NotForEngine(f"llguidance: {e}", keyword="pattern") from None


def llg_grammar(core, *, any_whitespace: bool, max_whitespace: int | None, strict: bool) -> str:
    """llguidance's grammar text for a core-form schema (JSON whitespace as xgrammar's: at most
    ``max_whitespace`` of space, newline, return, tab between tokens, or none)."""
    import llguidance  # optional extra: llguidance

    if any_whitespace:
        ws = "[ \\n\\r\\t]" + (f"{{0,{max_whitespace}}}" if max_whitespace is not None else "*")
        options = {"whitespace_flexible": True, "whitespace_pattern": ws, "lenient": False}
    else:
        options = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":", "lenient": False}
    schema = llg_schema(core, strict=strict)
    if isinstance(schema, dict):
        schema = share_repeats(schema)  # the core form's copies built once (:mod:`.llguidance_shared`)
    return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema, ensure_ascii=False), overrides=options)
