"""`typedlm serve` settings: flag > TYPEDLM_* env > --config FILE.toml > default; /v1/config redacts
secrets; the `typedlm` logger goes through uvicorn's handlers and logs one ready line with URL and model."""

import os
import re
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from typedlm.cli import app
from typedlm.server.config import REDACTED, ConfigError, ServeSettings, resolve_settings
from typedlm.server.logs import uvicorn_log_config
from typedlm.server.testing import free_port


def test_precedence_flag_over_env_over_file_over_default(tmp_path):
    f = tmp_path / "serve.toml"
    f.write_text('max-batch = 3\nmax_queue = 7\nport = 9001\nserved_model_names = ["a", "b"]\n')
    env = {"TYPEDLM_MAX_BATCH": "5", "TYPEDLM_PORT": "9002"}
    s = resolve_settings({"port": 9003}, config_file=f, env=env)
    assert s.port == 9003  # flag beats env and file
    assert s.max_batch == 5  # env beats file
    assert s.max_queue == 7  # file beats default
    assert s.served_model_names == ("a", "b")
    assert s.max_tokens_cap == ServeSettings().max_tokens_cap  # default
    assert resolve_settings({}, env={"TYPEDLM_SERVED_MODEL_NAMES": "x, y"}).served_model_names == ("x", "y")


@pytest.mark.parametrize("toml, env, message", [
    ("max_batchh = 3\n", {}, "unknown key 'max_batchh'"),
    ("max_batch = [\n", {}, "not valid TOML"),
    ("max_batch = 0\n", {}, "max_batch = 0 in config file"),
    ("", {"TYPEDLM_PORT": "http"}, "TYPEDLM_PORT='http': Input should be a valid integer"),
    ("", {"TYPEDLM_LOG_LEVEL": "loud"}, "TYPEDLM_LOG_LEVEL='loud'"),
])
def test_bad_values_name_field_and_source(tmp_path, toml, env, message):
    f = tmp_path / "serve.toml"
    f.write_text(toml)
    with pytest.raises(ConfigError, match=re.escape(message)):
        resolve_settings({}, config_file=f, env=env)


def test_every_serve_flag_is_a_setting():
    """The config file / env cover exactly the flags (no flag without a key, no key without a flag)."""
    import typer.main

    from typedlm.cli.ray import SERVE_FLAGS

    cmd = typer.main.get_command(app).commands["serve"]
    flags = {p.name for p in cmd.params} - {"config", *SERVE_FLAGS}  # --ray flags: typedlm.scale, not settings
    assert flags == set(ServeSettings.model_fields)
    defaults = {p.name: p.default for p in cmd.params if p.name in flags}
    assert defaults == {k: (None if v in ((),) else v) for k, v in ServeSettings().model_dump().items()}


def test_serve_bad_config_exits_2(tmp_path):
    f = tmp_path / "serve.toml"
    f.write_text("max_batch = -1\n")
    r = CliRunner().invoke(app, ["serve", "--config", str(f)])
    assert r.exit_code == 2 and "max_batch = -1 in config file" in r.stderr


def test_redacted_hides_the_api_key():
    s = ServeSettings(api_key="sekret")
    assert s.redacted()["api_key"] == REDACTED and "sekret" not in str(s.redacted())
    assert ServeSettings().redacted()["api_key"] is None


def test_log_config_wires_the_typedlm_logger():
    cfg = uvicorn_log_config("warning")
    assert cfg["loggers"]["typedlm"] == {"handlers": ["default"], "level": "WARNING", "propagate": False}
    assert uvicorn_log_config("trace")["loggers"]["typedlm"]["level"] == "DEBUG"


def test_serve_with_config_file_env_and_flags(tiny_dir, tmp_path):
    """A real `typedlm serve` subprocess: settings from all three sources, /v1/config shows the effective
    ones with the key redacted, and the log has one ready line with the URL and the model."""
    port = free_port()
    f = tmp_path / "serve.toml"
    f.write_text(f'model = "{tiny_dir}"\ndevice = "cpu"\nmax_batch = 3\nmax_queue = 5\nport = 1\n'
                 'step_tokens = 96\nthreads = 1\n')
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "TYPEDLM_API_KEY": "sekret", "TYPEDLM_MAX_QUEUE": "9"}
    proc = subprocess.Popen([sys.executable, "-m", "typedlm", "serve", "--config", str(f), "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer sekret"}
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(url + "/ready", headers=auth).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.2)
        assert httpx.get(url + "/ready", headers=auth).json()["step_tokens"] == 96  # the file's, to the scheduler
        assert httpx.get(url + "/v1/config").status_code == 401
        cfg = httpx.get(url + "/v1/config", headers=auth).json()
        s = cfg["settings"]
        assert (s["port"], s["max_batch"], s["max_queue"], s["device"]) == (port, 3, 9, "cpu")
        assert (s["step_tokens"], s["threads"]) == (96, 1)
        assert s["api_key"] == REDACTED and cfg["server"]["api_key"] == REDACTED
        assert "sekret" not in httpx.get(url + "/v1/config", headers=auth).text
    finally:
        proc.terminate()
        out = proc.communicate(timeout=20)[0]
    ready = [ln for ln in out.splitlines() if "typedlm ready" in ln]
    assert len(ready) == 1, out
    assert f"model {tiny_dir.name}" in ready[0] and url in ready[0] and ready[0].startswith("INFO:"), ready
