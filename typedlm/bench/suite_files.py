"""Where the bundled JSON-Schema-Test-Suite copy is, and its drafts and groups (light: ``--help`` reads them)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

GROUPS = ("required", "optional")
DEFAULT_SUITE = Path(str(resources.files("typedlm.bench") / "data" / "json-schema-test-suite"))
DRAFTS = ("draft4", "draft6", "draft7", "draft2019-09", "draft2020-12")
