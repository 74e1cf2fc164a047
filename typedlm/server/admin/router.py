"""GET /health, /ready, /metrics, and /v1/config (the effective settings, secrets redacted, and once loaded
the engine's own facts: the playground's header shows its model and device)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

router = APIRouter()


@router.get("/health")
async def health():
    return {"status": "ok"}


@router.get("/ready")
async def ready(http: Request):
    state = http.app.state.typedlm
    if not state.ready:
        e = state.not_ready()
        return JSONResponse({"status": "failed" if state.load_error else "loading", "error": e.message},
                            status_code=503, headers=e.headers)
    return {"status": "ready", "model": state.engine.name, "backend": state.engine.backend,
            "step_tokens": state.scheduler.work.step_tokens,
            "cuda_graph_capture_s": round(state.engine.runner.graph_stats(state.scheduler.kv)[1], 2)}


@router.get("/metrics")
async def metrics(http: Request):
    return Response(http.app.state.typedlm.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/v1/config")
async def v1_config(http: Request):
    """``settings``: what ``typedlm serve`` was given (every flag after env and file; None otherwise);
    ``server``: the limits; ``engine``: the loaded model's name, device, backend and dtype (None while
    loading)."""
    state = http.app.state.typedlm
    config = state.config
    eng = state.engine_or_none if state.ready else None
    engine = {"model": eng.name, "device": str(eng.device), "backend": eng.backend,
              "dtype": str(eng.dtype).removeprefix("torch.")} if eng is not None else None
    return {"settings": config.settings.redacted() if config.settings is not None else None,
            "server": config.redacted(), "engine": engine}
