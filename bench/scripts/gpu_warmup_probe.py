"""Diagnostic: per-forward time of the first and later generations in one process (cuDNN SDPA plan cost)."""
import time, torch
from typedlm.generate import generate
from typedlm.testing.archs import random_engine
from typedlm.generate import sequence as seqmod
from typedlm.engine import Engine
e = random_engine("qwen2.5-0.5b", device="cuda")
fw = []
real = Engine.forward
def f(self, *a, **k):
    torch.cuda.synchronize(); t = time.perf_counter(); out = real(self, *a, **k); torch.cuda.synchronize()
    fw.append(time.perf_counter() - t); return out
Engine.forward = f
def run(label, **kw):
    fw.clear(); t = time.perf_counter()
    r = generate("hello there, tell me a story", engine=e, max_tokens=128, **kw)
    dt = time.perf_counter() - t
    print(f"{label:28s} {len(r.token_ids)/dt:6.1f} tok/s  fwd ms {1e3*sum(fw[1:])/len(fw[1:]):6.2f}  ids {r.token_ids[:6]}")
run("greedy first", temperature=0)
run("sampled seed", temperature=1.0, seed=0)
run("sampled no seed", temperature=1.0)
run("greedy again", temperature=0)
# same sampled ids replayed greedily: force tokens via a processor
r = generate("hello there, tell me a story", engine=e, max_tokens=128, temperature=1.0, seed=0)
ids = list(r.token_ids)
def force(seen, logits):
    i = len(seen) - len(e.encode_prompt(prompt="hello there, tell me a story"))
    logits.fill_(-1e4); logits[ids[i] if i < len(ids) else 0] = 0
    return logits
run("greedy forced sampled ids", temperature=0, logits_processors=[force])
run("greedy forced token 0", temperature=0, logits_processors=[lambda s, l: l.fill_(-1e4).index_fill_(0, torch.tensor([15], device=l.device), 0)])
