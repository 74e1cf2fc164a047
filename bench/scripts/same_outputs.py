"""Seeded JSON generation on the tiny model (6 rows, jump-forward on for odd seeds): finish reason, token count
and a hash of each text. Run it on two builds; equal lines = unchanged behaviour (bench/results/runner-ab-cpu.md)."""
import hashlib, json, time
from typedlm.testing import tiny_engine
from typedlm.generate import generate
SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "integer"}}}, "required": ["a", "b"]}
eng = tiny_engine()
out = []
t = time.process_time()
for seed in range(6):
    r = generate("x", engine=eng, json_schema=SCHEMA, max_tokens=300, seed=seed, jump_forward=seed % 2 == 1)
    out.append((seed, r.finish_reason, len(r.token_ids), hashlib.md5(r.text.encode()).hexdigest()[:8]))
print(json.dumps(out), round(time.process_time() - t, 1))
