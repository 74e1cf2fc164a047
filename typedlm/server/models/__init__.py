"""/v1/models: router and the serving object that checks the model a request names."""
