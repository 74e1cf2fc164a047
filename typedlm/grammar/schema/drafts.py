"""Which draft a schema is written in, which of its keywords validate, and their 2020-12 form.

The draft comes from the root ``$schema`` (a known meta-schema URI; anything else means 2020-12, the
default). A keyword *validates* when the draft's jsonschema validator class implements it (its
``VALIDATORS``; plus the keywords those read beside them: ``then``/``else``, ``minContains``/
``maxContains``, draft 4's boolean ``exclusiveMinimum``/``exclusiveMaximum``). Identifiers
(``$id``/``id``, anchors, ``$defs``/``definitions``) are handled by ``referencing`` with the draft's
specification. Every other keyword is an *annotation*: a validator ignores it, so the normalizer does
too (``x-kubernetes-*``, ``example``, ``readonly``, ...); a ``$ref`` may still point into one.

:func:`translate` gives one schema object's validating keywords in their draft 2020-12 meaning, so
that the normalizer only knows 2020-12:

===========================================  ==================================================
draft 4/6/7 ``$ref`` with siblings            ``{"$ref"}`` (the siblings are ignored there)
draft 4 ``exclusiveMinimum: true``            ``exclusiveMinimum: <minimum>`` (same for maximum)
``items: [..]`` (+ ``additionalItems``)       ``prefixItems: [..]`` (+ ``items``)
``items: {..}`` beside ``additionalItems``    ``items: {..}`` (additionalItems is ignored)
``dependencies``                              arrays -> ``dependentRequired``, schemas -> ``dependentSchemas``
===========================================  ==================================================

The translated object remembers under which original keyword each translated one was written
(:class:`Translated`), so refusal pointers name the keyword as the user wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass

import jsonschema
import referencing.jsonschema as rjs


@dataclass(frozen=True)
class Draft:
    name: str  # the suite's folder name: draft4 ... draft2020-12
    validator: type  # the jsonschema validator class
    spec: object  # the referencing specification (how $id / anchors / subresources are found)
    validating: frozenset  # keywords that validate in this draft (all others are annotations)

    @property
    def legacy_ref(self) -> bool:
        """``$ref`` overrides its siblings (drafts 4, 6, 7)."""
        return self.name in ("draft4", "draft6", "draft7")


def _draft(name, cls, spec) -> Draft:
    v = set(cls.VALIDATORS)
    if "if" in v:
        v |= {"then", "else"}
    if "unevaluatedItems" in v:  # 2019-09 and later: contains reads them
        v |= {"minContains", "maxContains"}
    if name == "draft4":
        v |= {"exclusiveMinimum", "exclusiveMaximum"}  # booleans read by minimum / maximum
    if name in ("draft2019-09", "draft2020-12"):
        # the suite's optional dependencies-compatibility tests assert the old keyword here too
        v |= {"dependencies"}
    if name == "draft7":
        # draft 7 lets validators assert content (the suite's optional content tests do): refused
        v |= {"contentMediaType", "contentEncoding"}
    return Draft(name, cls, spec, frozenset(v))


DRAFTS = {d.name: d for d in (
    _draft("draft4", jsonschema.Draft4Validator, rjs.DRAFT4),
    _draft("draft6", jsonschema.Draft6Validator, rjs.DRAFT6),
    _draft("draft7", jsonschema.Draft7Validator, rjs.DRAFT7),
    _draft("draft2019-09", jsonschema.Draft201909Validator, rjs.DRAFT201909),
    _draft("draft2020-12", jsonschema.Draft202012Validator, rjs.DRAFT202012),
)}
DEFAULT = DRAFTS["draft2020-12"]
_BY_URI = {d.validator.META_SCHEMA["$schema"].rstrip("#"): d for d in DRAFTS.values()}


def draft_of(schema, default: Draft = DEFAULT) -> Draft:
    """The draft a schema's ``$schema`` names (with or without the trailing '#', http or https)."""
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    if not isinstance(uri, str):
        return default
    uri = uri.rstrip("#")
    for u in (uri, uri.replace("https://", "http://", 1), uri.replace("http://", "https://", 1)):
        if u in _BY_URI:
            return _BY_URI[u]
    return default


class Translated(dict):
    """A schema object in 2020-12 form; ``names`` maps a translated keyword to the one written."""

    names: dict

    def written(self, kw: str) -> str:
        return self.names.get(kw, kw)


def translate(node: dict, draft: Draft) -> Translated:
    """The validating keywords of one schema object, in their 2020-12 meaning (see the module doc)."""
    if draft.legacy_ref and "$ref" in node:
        out = Translated({"$ref": node["$ref"]})
        out.names = {}
        return out
    out = Translated({k: v for k, v in node.items() if k in draft.validating})
    out.names = {}
    if draft.name == "draft4":
        for excl, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if isinstance(out.get(excl), bool):
                if out.pop(excl) and bound in out:
                    out[excl] = out.pop(bound)
                    out.names[excl] = bound
    if "prefixItems" not in draft.validating:  # drafts before 2020-12: items [..] + additionalItems
        add = out.pop("additionalItems", None)
        if isinstance(out.get("items"), list):
            out["prefixItems"] = out.pop("items")
            out.names["prefixItems"] = "items"
            if add is not None:
                out["items"] = add
                out.names["items"] = "additionalItems"
    if "dependencies" in out:
        deps = out.pop("dependencies")
        if isinstance(deps, dict):
            for key, dep in deps.items():
                kw = "dependentRequired" if isinstance(dep, list) else "dependentSchemas"
                have = out.setdefault(kw, {})  # 2019-09+: may sit beside the new keyword
                if key not in have:
                    have[key] = dep
                elif kw == "dependentRequired":
                    have[key] = list(have[key]) + dep
                else:
                    have[key] = {"allOf": [have[key], dep]}
                out.names[kw] = "dependencies"
        else:
            out["dependentSchemas"] = deps  # not an object: the normalizer refuses it by name
            out.names["dependentSchemas"] = "dependencies"
    return out
