"""The playground in a real headless Chromium (Debian's `chromium`, driven by Playwright for Python through
`executable_path`) against a real server on the tiny model: the page loads, a decision runs and its
probability bars render, several texts give a table, an invalid schema shows the server's error, a
generation streams with its badges, a refused schema shows keyword and pointer.

No browser on a dev machine -> skipped with the reason; `.ci/run` sets TYPEDLM_REQUIRE_BROWSER=1, which turns
that skip into a failure. TYPEDLM_SCREENSHOTS=DIR writes the screenshots there (docs/ holds the committed ones).
"""

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest

from typedlm.decide import presets
from typedlm.decide.check import check_schema
from typedlm.decide.schema import SchemaError
from typedlm.server.app import create_app
from typedlm.server.state import ServerConfig
from typedlm.server.testing import live_server


def _chromium() -> str | None:
    for path in ("/usr/lib/chromium/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if path and os.access(path, os.X_OK):
            return path
    return None


def _need(reason: str):
    if os.environ.get("TYPEDLM_REQUIRE_BROWSER") == "1":
        pytest.fail(f"TYPEDLM_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    if exe is None:
        _need("no chromium on this machine (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("playwright is not installed (the dev extra)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def base(tiny):
    with live_server(create_app(tiny, ServerConfig(warmup=False))) as url:
        yield url


@pytest.fixture
def page(browser, base):
    p = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.goto(base + "/")
    yield p
    p.close()
    assert not errors, f"JavaScript errors: {errors}"


def shot(page, name):
    out = os.environ.get("TYPEDLM_SCREENSHOTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(out) / name), full_page=True)


def test_header_shows_the_loaded_model_and_device_and_nothing_is_missing(browser, base, tiny):
    p = browser.new_page()
    missing = []
    p.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
    p.goto(base + "/")
    p.wait_for_function("document.getElementById('server-info').textContent !== ''")
    assert p.inner_text("#server-info") == f"model {tiny.name} · {tiny.device}"
    p.wait_for_load_state("networkidle")
    assert not missing, missing  # no favicon.ico (or any other) 404
    p.close()


def test_decide_runs_and_bars_render(page):
    first = presets.names()[0]
    page.wait_for_function(f"document.getElementById('preset').value === {first!r}")
    page.wait_for_function("document.getElementById('schema-status').textContent.startsWith('valid')")
    page.click("#run-decide")
    page.wait_for_selector("#decide-results .field .bar", timeout=60_000)
    schema = presets.load(first)["schema"]
    fields = page.locator("#decide-results .field")
    assert fields.count() == len(schema.fields)
    for f in schema.fields:
        card = page.locator(f'#decide-results .field[data-field="{f.name}"]')
        bars = card.locator(".bar")
        n = 2 if f.type == "boolean" else len(f.choices)
        assert bars.count() == n, f.name
        widths = [float(w.rstrip("%")) for w in bars.locator(".fill").evaluate_all("els => els.map(e => e.style.width)")]
        assert all(0 <= w <= 100 for w in widths)
        if f.type != "multi":  # a distribution over the choices: the bars add up to 100 %
            assert abs(sum(widths) - 100) < 0.5, (f.name, widths)
            assert "runner-up" in card.inner_text() and "margin" in card.inner_text()
    assert "prefill" in page.inner_text("#decide-results .timings")
    assert "rows" in page.inner_text("#decide-results .timings")
    shot(page, "playground-decide.png")


def test_several_texts_give_a_table(page):
    page.wait_for_function("document.getElementById('schema-status').textContent.startsWith('valid')")
    page.fill("#contexts", "The app crashes on login.\n---\nThanks, all good now!\n---\nWhere is my invoice?")
    page.click("#run-decide")
    page.wait_for_selector("#decide-results table.many", timeout=60_000)
    assert page.locator("#decide-results table.many tr").count() == 1 + 3


@pytest.mark.parametrize("text", ['{"fields": {"x": {"type": "wat"}}}', '{"fields": {}}', '{"fields": '])
def test_invalid_schema_shows_its_error(page, text):
    page.wait_for_function("document.getElementById('schema-status').textContent.startsWith('valid')")
    page.fill("#schema", text)
    page.wait_for_selector("#schema-status.bad")
    shown = page.inner_text("#schema-status")
    try:
        check_schema(json.loads(text))
        expected = None
    except SchemaError as e:
        expected = str(e)
    except ValueError:
        expected = "not JSON"
    assert expected is not None and expected in shown, (shown, expected)
    if text.startswith('{"fields": {"x"'):
        shot(page, "playground-schema-error.png")


def test_generate_streams_with_badges(page):
    page.click("#tab-generate")
    page.select_option("#ckind", "json_schema")
    page.fill("#constraint", '{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, '
                             '"age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"], '
                             '"additionalProperties": false}')
    page.fill("#max-tokens", "60")
    page.click("#run-generate")
    page.wait_for_selector("#badge-finish:not(:empty)", timeout=60_000)
    chunks = int(page.get_attribute("#output", "data-chunks") or 0)
    assert chunks >= 2, "the output arrived as a stream of several chunks"
    finish = page.inner_text("#badge-finish")
    assert finish in ("finish_reason: stop", "finish_reason: length")
    valid = page.inner_text("#badge-valid")
    assert valid == ("schema_valid: true" if finish.endswith("stop") else "schema_valid: false")
    shot(page, "playground-generate.png")


def test_refused_schema_shows_keyword_and_pointer(page, base):
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                        "uniqueItems": True, "contains": {"const": "a"}}}}
    body = {"model": httpx.get(base + "/v1/models").json()["data"][0]["id"], "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "playground", "schema": schema,
                                                                       "strict": True}}}
    err = httpx.post(base + "/v1/chat/completions", json=body).json()["error"]
    assert err["code"] == "grammar_compile_error" and err["param"]
    page.click("#tab-generate")
    page.select_option("#ckind", "json_schema")
    page.fill("#constraint", json.dumps(schema))
    page.click("#run-generate")
    page.wait_for_selector("#generate-error:not(:empty)")
    shown = page.inner_text("#generate-error")
    assert err["message"] in shown and f"at {err['param']}" in shown and "uniqueItems" in shown


# Every visible element inside a column stays inside it, and no two of a column's own children overlap
# (the preset <select> once grew to its longest option, left its column and covered the texts' header).
OVERFLOW_JS = """() => {
  const bad = [];
  const name = (e) => e.id ? '#' + e.id : e.tagName.toLowerCase() + (e.className ? '.' + e.className : '');
  for (const col of document.querySelectorAll('.panel:not(.hidden) .col')) {
    const c = col.getBoundingClientRect();
    for (const e of col.querySelectorAll('*')) {
      const r = e.getBoundingClientRect();
      if (!r.width || !r.height) continue;
      if (r.left < c.left - 1 || r.right > c.right + 1) bad.push(`${name(e)} leaves its column (${Math.round(r.left)}..${Math.round(r.right)} vs ${Math.round(c.left)}..${Math.round(c.right)})`);
    }
    const kids = [...col.children].filter((e) => e.getBoundingClientRect().height > 0);
    for (let i = 1; i < kids.length; i++) {
      const a = kids[i - 1].getBoundingClientRect(), b = kids[i].getBoundingClientRect();
      if (b.top < a.bottom - 1) bad.push(`${name(kids[i - 1])} overlaps ${name(kids[i])}`);
    }
  }
  return bad;
}"""


@pytest.mark.parametrize("width", [1280, 1024, 760])
@pytest.mark.parametrize("tab", ["decide", "generate"])
def test_no_layout_overflow(browser, base, width, tab):
    p = browser.new_page(viewport={"width": width, "height": 900})
    try:
        p.goto(base + "/")
        p.wait_for_function("document.getElementById('preset').options.length > 1")  # long preset names loaded
        p.click(f"#tab-{tab}")
        assert p.evaluate(OVERFLOW_JS) == []
        assert p.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # no sideways scroll
    finally:
        p.close()
