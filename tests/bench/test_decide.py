"""``typedlm bench decide`` on the tiny model: one decision against the naive baseline, and ``decide_many`` over
shared-prefix contexts, with the parity checks the bench reports."""

from typedlm.bench.decide import run_bench, run_many, to_markdown
from typedlm.testing.contexts import contexts
from typedlm.decide import TOLERANCE


def test_bench_decide_runs_on_tiny(tiny):
    limit = tiny.runner.prefix_cache.limit_bytes
    assert limit > 0
    r = run_bench(tiny, preset="invoice_routing", runs=2, naive_runs=1, warmup=0, packings=("packed",),
                  progress=lambda m: None)
    assert set(r["decide"]) == {"labels/packed", "slots/packed"}
    # the same prompt every round, each computed whole (the cache's effect is bench prefix-cache's); restored after
    assert all(c["cached_prompt_tokens"] == 0 for c in r["decide"].values())
    assert tiny.runner.prefix_cache.limit_bytes == limit
    assert r["naive"]["schema_valid"] and all(c["speedup_vs_naive"] > 0 for c in r["decide"].values())
    assert all(p["within_tolerance"] and p["same_values"] for p in r["parity"].values())
    assert "| labels/packed |" in to_markdown(r, "cmd")


def test_bench_decide_many_runs_on_tiny(tiny):
    ctxs = contexts(tiny, 3, tokens=60)
    assert len(set(ctxs)) == 3 and all(len(tiny.tokenizer.encode(c)) >= 60 for c in ctxs)
    m = run_many(tiny, preset="invoice_routing", sizes=[1, 3], runs=1, tokens=60, parity_contexts=2,
                 progress=lambda _: None)
    one, three = m["sizes"]["1"], m["sizes"]["3"]
    assert one["tokens_reused"] == 0 and three["tokens_reused"] == 2 * three["shared_prefix_tokens"] > 0
    assert 0 < three["prefix_hit"] < 1 and three["field_decisions_per_s"] > 0 and "with_rescoring" in m
    assert m["parity"]["same_values"] and m["parity"]["max_abs_log_score_diff"] <= TOLERANCE
    r = {"model": "tiny", "machine": "cpu", "preset": "invoice_routing", "fields": 3, "many": m}
    assert "| 3 |" in to_markdown(r, "cmd")
