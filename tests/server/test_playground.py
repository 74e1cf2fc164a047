"""The playground's routes on a real server (tiny model): the page and its static files (open even with an
API key), the bundled presets, schema validation identical to `typedlm validate`, the output schema check."""

import json

import httpx
import pytest
from typer.testing import CliRunner

from typedlm.cli import app as cli_app
from typedlm.decide import presets
from typedlm.decide.schema import DecisionSchema
from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server

KEY = {"Authorization": "Bearer k"}


@pytest.fixture(scope="module")
def base(tiny):
    with live_server(create_app(tiny, ServerConfig(warmup=False, api_key="k")), api_key="k") as url:
        yield url


def test_page_and_static_files_need_no_key(base):
    r = httpx.get(base + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert '<script src="/static/app.js">' in r.text
    for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        r = httpx.get(f"{base}/static/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind) and len(r.content) > 500
    assert httpx.get(base + "/static/nope.js").status_code == 404
    assert httpx.get(base + "/static/..%2Fapp.py").status_code == 404
    assert httpx.get(base + "/v1/decide/presets").status_code == 401  # the API is still gated


def test_presets(base):
    got = httpx.get(base + "/v1/decide/presets", headers=KEY).json()["presets"]
    assert [p["name"] for p in got] == presets.names()
    for p in got:
        assert DecisionSchema.from_dict(p["schema"]).key == presets.load(p["name"])["schema"].key
        assert p["examples"] and isinstance(p["schema"], dict) and p["description"]


@pytest.mark.parametrize("schema", [
    {"fields": {"spam": {"type": "boolean", "description": "Is it spam?"}}},
    {"fields": {"tone": {"type": "enum", "description": "Tone?", "choices": ["calm"]}}},
    {"fields": {"x": {"type": "wat"}}},
    {"nope": 1},
])
def test_validate_says_what_typedlm_validate_says(base, tmp_path, schema):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(schema))
    cli = CliRunner().invoke(cli_app, ["validate", str(f), "--json"])
    http = httpx.post(base + "/v1/decide/validate", json={"schema": schema}, headers=KEY).json()
    if cli.exit_code == 0:
        out = json.loads(cli.stdout)
        assert http["valid"] is True and http["fields"] == out["fields"] and http["warnings"] == out["warnings"]
        assert set(http["rows"]) == {"labels", "slots"}  # the served tokenizer counts the rows
    else:
        assert cli.exit_code == 2 and http["valid"] is False
        assert cli.stderr.strip() == f"error: {' '.join(http['error'].split())}"


def test_schema_check(base):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    ok = httpx.post(base + "/v1/schema/check", json={"schema": schema, "text": '{"a": 1}'}, headers=KEY).json()
    bad = httpx.post(base + "/v1/schema/check", json={"schema": schema, "text": '{"a": "x"}'}, headers=KEY).json()
    cut = httpx.post(base + "/v1/schema/check", json={"schema": schema, "text": '{"a": '}, headers=KEY).json()
    assert ok == {"schema_valid": True, "errors": []}
    assert bad["schema_valid"] is False and "a" in bad["errors"][0]
    assert cut["schema_valid"] is False and cut["errors"][0].startswith("not JSON")
    assert httpx.post(base + "/v1/schema/check", json={"text": "1"}, headers=KEY).status_code == 400
