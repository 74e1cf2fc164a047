"""OpenAI error shape for every error response: {"error": {"message", "type", "param", "code"}}."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import GrammarCompileError, TypedLMError

log = logging.getLogger("typedlm.server")


class APIError(Exception):
    """Raise from a handler to answer ``status`` with the OpenAI error shape."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers or {}


DISCONNECT_POLL_S = 0.5  # how often a waiting request checks that its client is still there


class ClientGone(Exception):
    """The client left before its answer: the request's work is cancelled and the answer is 499 (nginx's "client
    closed request"; nobody reads it), with no traceback in the log."""


def error_response(status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                   code: str | None = None, headers: dict | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": type, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api(_: Request, e: APIError):
        return error_response(e.status, e.message, type=e.type, param=e.param, code=e.code, headers=e.headers)

    @app.exception_handler(GrammarCompileError)
    async def _grammar(_: Request, e: GrammarCompileError):
        return error_response(400, str(e), param=e.pointer, code="grammar_compile_error")

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, e: ClientGone):
        log.info("%s %s: %s", request.method, request.url.path, e)
        return error_response(499, str(e), code="client_gone")

    @app.exception_handler(TypedLMError)
    async def _typed(_: Request, e: TypedLMError):
        return error_response(400, str(e))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError):
        errs = e.errors()
        msg, param = validation_message(errs[0] if errs else {})
        return error_response(400, msg, param=param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException):
        typ = "invalid_request_error" if e.status_code < 500 else "server_error"
        return error_response(e.status_code, str(e.detail), type=typ, headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, e: Exception):
        log.exception("internal error")
        return error_response(500, f"internal error: {type(e).__name__}", type="server_error")


def validation_message(err: dict) -> tuple[str, str | None]:
    """(message, param) of a request body's first validation error. A body that is not JSON names its
    position in the message and no param; an unsupported field (``ctx["field"]``: the documented fields of
    :func:`typedlm.server.protocol.without_documented`) is the param, after the place it sits in."""
    loc = [str(x) for x in err.get("loc", ()) if x != "body"]
    ctx = err.get("ctx") or {}
    if err.get("type") == "json_invalid":
        where = f" at position {loc[-1]}" if loc else ""
        return f"the request body is not valid JSON: {ctx.get('error', 'cannot be parsed')}{where}", None
    if err.get("type") == "missing" and not loc:
        return "the request body is empty: send a JSON object", None
    msg = err.get("msg", "invalid request")
    param = ".".join(loc + [ctx["field"]] if "field" in ctx else loc) or None
    return (f"{'.'.join(loc)}: {msg}" if loc else msg), param
