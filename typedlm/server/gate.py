"""One pure-ASGI middleware in front of every route: X-Request-Id, body-size limit (413), API key
(401, constant-time compare), and the requests-by-status counter. Pure ASGI (not BaseHTTPMiddleware)
so streaming responses and client disconnects pass through untouched."""

from __future__ import annotations

import hmac
import json
import re
import uuid

_RID_OK = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
OPEN_PATHS = ("/health", "/")  # and the playground's static files (/static/...): no secrets there
OPEN_PREFIX = "/static/"


class Gate:
    def __init__(self, app, *, state):
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        cfg = self.state.config
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        rid = headers.get("x-request-id", "")
        if not _RID_OK.match(rid):
            rid = uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        path = scope.get("path", "")
        metrics = self.state.metrics

        async def send_tagged(message):
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + [(b"x-request-id", rid.encode())]
                if metrics is not None:
                    metrics.count_request(path, message["status"])
            await send(message)

        if cfg.api_key and path not in OPEN_PATHS and not path.startswith(OPEN_PREFIX):
            auth = headers.get("authorization", "")
            given = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(given.encode(), cfg.api_key.encode()):
                return await _error(send_tagged, 401, "missing or invalid API key (Authorization: Bearer KEY)",
                                    code="invalid_api_key", extra=[(b"www-authenticate", b"Bearer")])

        limit = cfg.max_body_bytes
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await _error(send_tagged, 413, f"request body is {declared} bytes; the limit is {limit}",
                                code="request_too_large")
        if scope.get("method") in ("POST", "PUT", "PATCH"):
            body, more = bytearray(), True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                more = message.get("more_body", False)
                if len(body) > limit:
                    return await _error(send_tagged, 413, f"request body exceeds the limit of {limit} bytes",
                                        code="request_too_large")
            replayed = False

            async def replay():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": bytes(body), "more_body": False}
                return await receive()  # later calls: wait for http.disconnect

            return await self.app(scope, replay, send_tagged)
        return await self.app(scope, receive, send_tagged)


async def _error(send, status: int, message: str, *, code: str, extra=()):
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                 "code": code}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *extra]})
    await send({"type": "http.response.body", "body": body})
