"""/health, /ready, /metrics, /v1/config."""
