"""Runtime parameters and shovel status (issue 27): ``/api/parameters[/{component}[/{vhost}
[/{name}]]]``, ``/api/shovels[/{vhost}]`` and ``DELETE /api/shovels/vhost/{vhost}/{name}/restart``,
in RabbitMQ 3.10's shapes (with its rabbitmq_shovel_management plugin).

A parameter is ``{"value", "vhost", "component", "name"}``; the one component is ``shovel``
(``amqp_broker.shovel``). PUT takes ``{"value": {...}}`` (also with ``component``, ``vhost``,
``name``) and answers 201 created / 204 replaced; 400 ``bad_request`` with ``"Validation
failed\\n\\n<errors>\\n"`` (RabbitMQ's texts, ``<`` and ``>`` HTML-escaped as its API does) for a
bad value, 404 for an unknown vhost or component; DELETE 204, 404 when unknown. Changes need the
``policymaker`` tag (or higher). GET /api/shovels answers each shovel's status
(``manager.ShovelManager.status``); restart answers 204, 404 for an unknown shovel.
Source: RabbitMQ "Management HTTP API" (parameters), rabbitmq_shovel_management README.
"""

from __future__ import annotations

import html

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.access import Account
from ..shovel.manager import ShovelManager
from ..shovel.params import ShovelParamError, validate
from .api import endpoint
from .context import Management
from .http import (
    HTTPError,
    created,
    json_response,
    list_response,
    no_content,
    not_found,
    path_vhost,
    read_json,
)
from .routes_shared import listed_vhost, listing_routes, object_routes, vhost_and_name

__all__ = ["ROUTES", "validation_failed", "shovels_of", "import_parameters"]

#: the components this broker knows (RabbitMQ's with the shovel plugin enabled)
COMPONENTS = ("shovel",)


def validation_failed(text: str) -> HTTPError:
    """RabbitMQ's 400 for a parameter its validation refuses (each error on a line)."""
    escaped = html.escape(text, quote=False)
    return HTTPError(400, "bad_request", f"Validation failed\n\n{escaped}\n")


def shovels_of(mgmt: Management) -> ShovelManager:
    """The broker's shovel manager (made at start by ``management.server``)."""
    if mgmt.shovels is None:
        def local() -> tuple[str, int] | None:
            amqp = mgmt.listener("amqp")
            return (amqp.host, amqp.port) if amqp is not None else None

        mgmt.shovels = ShovelManager(mgmt.broker, mgmt.data_dir, local)
    return mgmt.shovels


def _component(request: Request) -> str:
    component = path_vhost(request, "component")
    if component not in COMPONENTS:
        raise not_found()
    return component


@endpoint()
async def list_parameters(request: Request, mgmt: Management, user: Account) -> Response:
    """Every parameter, or those of ``{component}`` (and ``{vhost}``)."""
    if "component" in request.path_params:
        _component(request)
    vhost = listed_vhost(request, mgmt)
    return list_response(request, shovels_of(mgmt).parameters(vhost))


@endpoint()
async def show_parameter(request: Request, mgmt: Management, user: Account) -> Response:
    """One parameter; 404 when unknown."""
    _component(request)
    d = shovels_of(mgmt).get(path_vhost(request), path_vhost(request, "name"))
    if d is None:
        raise not_found()
    return json_response({"value": d.value, "vhost": d.vhost, "component": "shovel",
                          "name": d.name})


@endpoint("policymaker")
async def put_parameter(request: Request, mgmt: Management, user: Account) -> Response:
    """Set a parameter: 201 / 204; 400 with RabbitMQ's validation text; 404 unknown vhost."""
    _component(request)
    vhost, name = vhost_and_name(request, mgmt)
    body = await read_json(request)
    try:
        d = validate(vhost, name, body.get("value"))
    except ShovelParamError as exc:
        raise validation_failed(str(exc)) from None
    return created() if shovels_of(mgmt).put(d) else no_content()


@endpoint("policymaker")
async def delete_parameter(request: Request, mgmt: Management, user: Account) -> Response:
    """Clear a parameter: 204, 404 when unknown."""
    _component(request)
    if not shovels_of(mgmt).delete(path_vhost(request), path_vhost(request, "name")):
        raise not_found()
    return no_content()


def import_parameters(mgmt: Management, items: list[dict], only_vhost: str | None = None) -> None:
    """Set the ``shovel`` parameters of a definitions file (``{"component", "vhost", "name",
    "value"}`` each; other components are skipped, as this broker has none). Raises
    ``HTTPError`` 400 for a refused value or an unknown vhost."""
    for item in items:
        if item.get("component") not in COMPONENTS:
            continue
        vhost = only_vhost or str(item.get("vhost", "/"))
        if vhost not in mgmt.broker.vhosts:
            raise HTTPError(400, "bad_request", f"vhost '{vhost}' does not exist")
        try:
            d = validate(vhost, str(item.get("name", "")), item.get("value"))
        except ShovelParamError as exc:
            raise validation_failed(str(exc)) from None
        shovels_of(mgmt).put(d)


@endpoint()
async def list_shovels(request: Request, mgmt: Management, user: Account) -> Response:
    """Every shovel's status, or those of ``{vhost}``."""
    vhost = listed_vhost(request, mgmt)
    return list_response(request, shovels_of(mgmt).status(vhost))


@endpoint("policymaker")
async def restart_shovel(request: Request, mgmt: Management, user: Account) -> Response:
    """Restart a shovel: 204, 404 when unknown."""
    if not shovels_of(mgmt).restart(path_vhost(request), path_vhost(request, "name")):
        raise not_found()
    return no_content()


ROUTES = [
    Route("/api/parameters", list_parameters, methods=["GET"]),
    *listing_routes("/api/parameters/{component}", list_parameters),
    *object_routes("/api/parameters/{component}/{vhost}/{name}", show_parameter, put_parameter,
                   delete_parameter),
    *listing_routes("/api/shovels", list_shovels),
    Route("/api/shovels/vhost/{vhost}/{name}/restart", restart_shovel, methods=["DELETE"]),
]
