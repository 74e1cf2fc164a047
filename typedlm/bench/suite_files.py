"""Where the JSON-Schema-Test-Suite is, and its drafts and groups (light: ``--help`` reads them)."""

from __future__ import annotations

from pathlib import Path

GROUPS = ("required", "optional")
# The repository's copy (test data, not in the wheel); elsewhere pass a checkout of the suite (``--suite``).
DEFAULT_SUITE = Path(__file__).resolve().parents[2] / "tests" / "data" / "json-schema-test-suite"
DRAFTS = ("draft4", "draft6", "draft7", "draft2019-09", "draft2020-12")
