"""A real uvicorn server on a free loopback port, in a thread (tests, examples)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def live_server(app, *, wait_ready: bool = True, timeout: float = 120.0, api_key: str | None = None):
    """Run ``app`` on 127.0.0.1:<free port>; yields the base URL (``http://127.0.0.1:PORT``)."""
    import httpx  # optional extra: server
    import uvicorn  # optional extra: server

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    if wait_ready:
        while httpx.get(f"{url}/ready", headers=headers).status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become ready")
            time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(15)
