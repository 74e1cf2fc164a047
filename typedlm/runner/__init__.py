"""The model runner: the one place a model runs (prefill, decode steps, extends, scoring passes) and the
KV caches behind a declared contract (:mod:`.contract`). Generation and decisions both call it."""
