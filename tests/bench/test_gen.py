"""``typedlm bench gen`` smoke run on the tiny model: JSON out, both engines, both modes."""

import json

from typer.testing import CliRunner

from typedlm.cli import app


def test_bench_gen_tiny(tmp_path):
    out = tmp_path / "gen.json"
    r = CliRunner().invoke(app, ["bench", "gen", "--arch", "tiny", "--device", "cpu", "--batch", "1", "--batch", "3",
                                 "--max-tokens", "6", "--json", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["bench"] == "gen" and res["vocab"] > 49152
    combos = {(x["engine"], x["batch"], x["mode"]) for x in res["results"]}
    assert combos == {(e, b, m) for e in ("typedlm", "hf_generate") for b in (1, 3) for m in ("free", "json_schema")}
    for x in res["results"]:
        assert "error" not in x and x["tokens"] > 0 and x["tok_s"] > 0
    free3 = next(x for x in res["results"] if x["engine"] == "typedlm" and x["batch"] == 3 and x["mode"] == "free")
    assert free3["tokens"] == 18 and free3["finish"] == ["length"]
    assert res["kv"] == "StaticKV" and res["cuda_graphs"] == 0  # the CPU runs eager
    assert set(res["json_over_free"]) == {f"{e} b{b}" for e in ("typedlm", "hf_generate") for b in (1, 3)}


def test_bench_gen_bad_arch():
    r = CliRunner().invoke(app, ["bench", "gen", "--arch", "nope", "--device", "cpu"])
    assert r.exit_code == 2 and "unknown arch" in r.output


def test_bench_gen_deterministic_tiny(tmp_path):
    out = tmp_path / "gen.json"
    r = CliRunner().invoke(app, ["bench", "gen", "--arch", "tiny", "--device", "cpu", "--batch", "2", "--max-tokens",
                                 "4", "--no-hf", "--deterministic", "--json", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["deterministic"] and res["command"].endswith("--deterministic")
    assert all("error" not in x and x["tokens"] == 8 for x in res["results"])
