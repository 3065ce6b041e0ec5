"""The management HTTP application (Starlette): ``/api/...`` routes and the web page at ``/``.

``build_app(mgmt)`` returns an ASGI app; ``server.serve_http`` serves it inside the broker's event
loop. Paths are routed on the raw (still percent-encoded) path, so ``/api/queues/%2F/q`` names
vhost "/" as RabbitMQ's API does; routes decode their parameters. Unknown paths under /api: 404
``{"error": "Object Not Found", "reason": "Not Found"}``; a wrong method: 405.
Source: "Management HTTP API" (rabbitmq-management priv/www/api/index.html).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from . import (
    definitions_json,
    routes_access,
    routes_conns,
    routes_exchanges,
    routes_federation,
    routes_maintenance,
    routes_node,
    routes_parameters,
    routes_policies,
    routes_queues,
    routes_replicas,
)
from .context import Management
from .http import HTTPError, not_found

__all__ = ["build_app", "STATIC"]

STATIC = Path(__file__).resolve().parent / "static"


class RawPath:
    """ASGI middleware: route on ``raw_path`` (percent-encoding kept) instead of the decoded
    ``path``, so "%2F" inside a segment is not a separator; one trailing slash under /api is
    dropped (RabbitMQ answers ``/api/queues/`` as ``/api/queues``: Flower's broker page asks
    for that when the broker URL names vhost "/" as ``amqp://host//``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("raw_path"):
            scope = dict(scope)
            path = scope["raw_path"].decode("latin-1").split("?", 1)[0]
            if path.startswith("/api/") and path.endswith("/") and len(path) > 5:
                path = path[:-1]
            scope["path"] = path
        await self.app(scope, receive, send)


async def index(request: Request) -> Response:
    """The web page."""
    return FileResponse(STATIC / "index.html")


async def api_not_found(request: Request) -> Response:
    """Anything else under /api."""
    return not_found().response()


async def _http_error(request: Request, exc: Any) -> Response:
    status = getattr(exc, "status_code", 500)
    if status == 404:
        return not_found().response()
    if status == 405:
        return HTTPError(405, "Method Not Allowed", "Method Not Allowed").response()
    return HTTPError(status, "error", str(getattr(exc, "detail", exc))).response()


def build_app(mgmt: Management) -> ASGIApp:
    """The ASGI app serving ``mgmt``'s broker."""
    routes = [*routes_node.ROUTES, *routes_replicas.ROUTES, *routes_maintenance.ROUTES,
              *routes_queues.ROUTES,
              *routes_exchanges.ROUTES,
              *routes_conns.ROUTES, *routes_parameters.ROUTES,
              *routes_federation.ROUTES, *routes_access.ROUTES,
              *routes_policies.ROUTES,
              *definitions_json.ROUTES,
              Route("/api/{rest:path}", api_not_found, methods=["GET", "PUT", "POST", "DELETE"]),
              Route("/", index),
              Mount("/static", StaticFiles(directory=STATIC), name="static")]
    app = Starlette(routes=routes, exception_handlers={404: _http_error, 405: _http_error})
    app.state.mgmt = mgmt
    return RawPath(app)
