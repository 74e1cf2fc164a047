"""/v1/chat/completions: router, serving object, request body; a request's plan (plan.py), tool calls (tools.py)."""
