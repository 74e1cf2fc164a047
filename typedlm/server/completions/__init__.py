"""/v1/completions: router, serving object, request body."""
