"""One end-to-end decision on the default model (SmolLM2-135M), with the batched-vs-one-row parity check."""

import pytest

from typedlm.decide import TOLERANCE, decide, presets


@pytest.mark.real_model
def test_decide_end_to_end_default_model(real):
    p = presets.load("content_moderation")
    ctx = p["examples"][0]
    d = decide(p["schema"], ctx, engine=real)
    assert set(d.value) == set(p["schema"].names) and d.usage["passes"] == 1
    assert d.value["action"] in ("allow", "review", "remove")
    assert set(d.value["violations"]) <= {c.value for c in p["schema"]["violations"].choices}
    # a real model understands the answer format: most of its mass is on legal continuations
    assert d.fields["contains_link"].legal_mass > 0.05
    ref = decide(p["schema"], ctx, engine=real, packing="expand", max_rows=1)
    assert ref.value_dict() == d.value_dict()
    diff = max(abs(x - y) for n in d.fields for x, y in zip(d.fields[n].log_scores.values(),
                                                            ref.fields[n].log_scores.values()))
    assert diff <= TOLERANCE
