"""The browser playground: the page and its static files, and the routes it uses."""
