"""What the management API's per-vhost object routes share (policies, runtime parameters, shovels,
users, vhosts, permissions): the ``{vhost}`` of a listing route and of an object's route, checked
against the broker's vhosts, and the routes of a listing and of one object, in RabbitMQ's URL
shapes (``/api/<kind>``, ``/api/<kind>/{vhost}``; GET / PUT / DELETE on the object's path).
Source: RabbitMQ "Management HTTP API" (an unknown vhost in a path is 404 "Object Not Found").
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.routing import Route

from .context import Management
from .http import not_found, path_vhost

__all__ = ["listed_vhost", "vhost_and_name", "listing_routes", "object_routes"]


def listed_vhost(request: Request, mgmt: Management) -> str | None:
    """The ``{vhost}`` of a listing route (``.../{vhost}``), None on the route without one.
    Raises ``HTTPError`` 404 when the vhost does not exist."""
    vhost = path_vhost(request) if "vhost" in request.path_params else None
    if vhost is not None and vhost not in mgmt.broker.vhosts:
        raise not_found()
    return vhost


def vhost_and_name(request: Request, mgmt: Management) -> tuple[str, str]:
    """(``{vhost}``, ``{name}``) of an object's route (percent-decoded). Raises ``HTTPError``
    404 when the vhost does not exist (PUT of an object into a vhost that is not there)."""
    vhost, name = path_vhost(request), path_vhost(request, "name")
    if vhost not in mgmt.broker.vhosts:
        raise not_found()
    return vhost, name


def listing_routes(path: str, listing: Callable) -> list[Route]:
    """GET ``path`` and ``path/{vhost}``, both answered by ``listing``."""
    return [Route(path, listing, methods=["GET"]),
            Route(path + "/{vhost}", listing, methods=["GET"])]


def object_routes(path: str, show: Callable, put: Callable, delete: Callable) -> list[Route]:
    """GET (``show``), PUT (``put``) and DELETE (``delete``) of the object at ``path``."""
    return [Route(path, show, methods=["GET"]), Route(path, put, methods=["PUT"]),
            Route(path, delete, methods=["DELETE"])]
