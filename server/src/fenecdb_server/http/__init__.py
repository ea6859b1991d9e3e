"""The HTTP layer of `fenec-server` (http.md): the ASGI app, held claims, errors and limits."""

from .app import App, Config, create_app

__all__ = ["App", "Config", "create_app"]
