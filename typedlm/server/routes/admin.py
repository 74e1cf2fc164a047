"""GET /health, /ready, /metrics."""

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
            "decide_mode": state.decide_mode,
            "cuda_graph_capture_s": round(state.engine.runner.graph_stats(state.scheduler.kv)[1], 2)}


@router.get("/metrics")
async def metrics(http: Request):
    return Response(http.app.state.typedlm.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
