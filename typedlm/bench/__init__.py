"""Benchmarks (`typedlm bench ...`). Each prints JSON and a table; results live in bench/results/."""
