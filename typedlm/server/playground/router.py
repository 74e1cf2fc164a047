"""The browser playground and the small routes it (and anyone) uses.

Routes (:data:`router`, included by :func:`typedlm.server.app.create_app`):
  ``GET /``                     the playground page (``static/index.html`` beside this file)
  ``GET /static/{name}``        its script and style sheet (shipped as package data; no build step)
  ``GET /v1/decide/presets``    the bundled decide presets (name, description, schema, examples)
  ``POST /v1/decide/validate``  ``{"schema": ...}`` -> the checks ``typedlm validate`` runs
                                (:func:`typedlm.decide.check.check_schema`, with the served tokenizer once
                                the model is loaded): 200 ``{"valid": true, "fields", "warnings", "rows"}``
                                or 200 ``{"valid": false, "error"}``
  ``POST /v1/schema/check``     ``{"schema", "text"}`` -> ``{"schema_valid", "errors"}``: the same jsonschema
                                verdict a generation result carries (:func:`typedlm.generate.result.check_schema`);
                                the playground badges a streamed output with it

``/`` and ``/static/*`` need no API key (static files only; the page sends the key the user types).
"""

from __future__ import annotations

from importlib import resources
import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from ...decide import presets
from ...decide.check import check_schema
from ...decide.schema import SchemaError
from ...generate.result import check_schema as check_output
from ..errors import APIError

router = APIRouter()
STATIC_PREFIX = "/static/"
_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".html": "text/html; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml"}
_NAME = re.compile(r"^[A-Za-z0-9_-]+\.[a-z]+$")


def _static(name: str) -> bytes | None:
    f = resources.files(__package__) / "static" / name
    return f.read_bytes() if f.is_file() else None


@router.get("/", include_in_schema=False)
async def index():
    return HTMLResponse(_static("index.html"))


@router.get(STATIC_PREFIX + "{name}", include_in_schema=False)
async def static(name: str):
    ext = name[name.rfind("."):] if "." in name else ""
    data = _static(name) if _NAME.match(name) and ext in _TYPES else None
    if data is None:
        raise APIError(404, f"no static file {name!r}", code="not_found")
    return Response(data, media_type=_TYPES[ext], headers={"Cache-Control": "no-cache"})


@router.get("/v1/decide/presets")
async def v1_presets():
    return {"presets": [{**presets.raw(name), "name": name} for name in presets.names()]}


class ValidateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_: Any = Field(alias="schema")


@router.post("/v1/decide/validate")
async def v1_validate(body: ValidateRequest, request: Request):
    state = request.app.state.typedlm
    tok = state.engine_or_none.tokenizer if state.ready else None
    try:
        _, out = check_schema(body.schema_, tok)
    except SchemaError as e:
        return {"valid": False, "error": str(e)}
    return out


class SchemaCheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_: dict | bool = Field(alias="schema")
    text: str


@router.post("/v1/schema/check")
async def v1_schema_check(body: SchemaCheckRequest):
    valid, errors = check_output(body.text, body.schema_)
    return {"schema_valid": valid, "errors": errors}
