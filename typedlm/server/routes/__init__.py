"""One thin router per endpoint family; each handler hands the request to a serving object
(``app.state.serving``, built by :func:`typedlm.server.app.create_app`)."""
