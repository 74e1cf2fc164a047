"""Benchmarks (`typedlm bench ...`). Each prints JSON and a table; ``--json`` writes the JSON to a file."""
