"""``typedlm serve`` as a real subprocess on a free loopback port, driven by the openai client."""

import os
import subprocess
import sys
import time

import httpx
import openai
from typer.testing import CliRunner

from typedlm.cli import app
from typedlm.server.testing import free_port


def test_serve_bad_port():
    r = CliRunner().invoke(app, ["serve", "--port", "0"])
    assert r.exit_code == 2 and "--port 0" in r.output


def test_serve_subprocess(tiny_dir):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "typedlm", "serve", "--model", str(tiny_dir), "--port", str(port),
                             "--device", "cpu", "--api-key", "k", "--max-batch", "2", "--log-level", "warning"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read()
            try:
                if httpx.get(url + "/ready", headers={"Authorization": "Bearer k"}).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not become ready"
            time.sleep(0.2)
        client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        assert str(tiny_dir) in [m.id for m in client.models.list().data]
        r = client.chat.completions.create(model=str(tiny_dir), messages=[{"role": "user", "content": "hi"}],
                                           max_tokens=20, extra_body={"guided_choice": ["left", "right"]})
        assert r.choices[0].message.content in ("left", "right")
    finally:
        proc.terminate()
        proc.wait(20)
