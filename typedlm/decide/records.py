"""The one line ``typedlm decide --input ... --output`` writes per context (single process and ``--ray`` alike)."""

from __future__ import annotations

import json


def decision_line(cid, decision) -> str:
    """``{"id": cid, **Decision.to_dict()}`` as one JSON line (no newline)."""
    return json.dumps({"id": cid, **decision.to_dict()}, ensure_ascii=False)
