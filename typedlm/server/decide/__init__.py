"""/v1/decide and /v1/systemone: router, serving object, request bodies."""
