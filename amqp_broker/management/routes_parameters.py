"""Runtime parameters and shovel status (issue 27): ``/api/parameters[/{component}[/{vhost}
[/{name}]]]``, ``/api/shovels[/{vhost}]`` and ``DELETE /api/shovels/vhost/{vhost}/{name}/restart``,
in RabbitMQ 3.10's shapes (with its rabbitmq_shovel_management plugin).

A parameter is ``{"value", "vhost", "component", "name"}``; the components are ``shovel``
(``amqp_broker.shovel``) and ``federation-upstream`` / ``federation-upstream-set``
(``amqp_broker.federation``). PUT takes ``{"value": {...}}`` (also with ``component``, ``vhost``,
``name``) and answers 201 created / 204 replaced; 400 ``bad_request`` with ``"Validation
failed\\n\\n<errors>\\n"`` (RabbitMQ's texts, ``<`` and ``>`` HTML-escaped as its API does) for a
bad value, 404 for an unknown vhost or component; DELETE 204, 404 when unknown. Changes need the
``policymaker`` tag (or higher). GET /api/shovels answers each shovel's status
(``manager.ShovelManager.status``); restart answers 204, 404 for an unknown shovel.
Source: RabbitMQ "Management HTTP API" (parameters), rabbitmq_shovel_management README.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.access import Account
from ..federation.manager import FederationManager
from ..federation.params import COMPONENTS as FEDERATION
from ..federation.params import FederationParamError
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

__all__ = ["ROUTES", "validation_failed", "shovels_of", "federation_of", "import_parameters",
           "all_parameters"]

#: the components this broker knows (RabbitMQ's with the shovel and federation plugins enabled)
COMPONENTS = ("shovel", *FEDERATION)


def validation_failed(text: str) -> HTTPError:
    """RabbitMQ's 400 for a parameter its validation refuses (each error on a line)."""
    escaped = html.escape(text, quote=False)
    return HTTPError(400, "bad_request", f"Validation failed\n\n{escaped}\n")


def shovels_of(mgmt: Management) -> ShovelManager:
    """The broker's shovel manager (made at start by ``management.server``)."""
    if mgmt.shovels is None:
        mgmt.shovels = ShovelManager(mgmt.broker, mgmt.data_dir, _local(mgmt))
    return mgmt.shovels


def federation_of(mgmt: Management) -> FederationManager:
    """The broker's federation manager (made at start by ``management.server``)."""
    if mgmt.federation is None:
        mgmt.federation = FederationManager(mgmt.broker, mgmt.data_dir, _local(mgmt))
    return mgmt.federation


def _local(mgmt: Management) -> Callable[[], tuple[str, int] | None]:
    def local() -> tuple[str, int] | None:
        amqp = mgmt.listener("amqp")
        return (amqp.host, amqp.port) if amqp is not None else None

    return local


def all_parameters(mgmt: Management, vhost: str | None = None,
                   component: str | None = None) -> list[dict]:
    """Every runtime parameter (of ``vhost``, of ``component``) as GET /api/parameters
    answers them: the shovels', then the federation's."""
    out = shovels_of(mgmt).parameters(vhost) if component in (None, "shovel") else []
    if component != "shovel":
        out += federation_of(mgmt).parameters(vhost, component)
    return out


def _component(request: Request) -> str:
    component = path_vhost(request, "component")
    if component not in COMPONENTS:
        raise not_found()
    return component


@endpoint()
async def list_parameters(request: Request, mgmt: Management, user: Account) -> Response:
    """Every parameter, or those of ``{component}`` (and ``{vhost}``)."""
    component = _component(request) if "component" in request.path_params else None
    vhost = listed_vhost(request, mgmt)
    return list_response(request, all_parameters(mgmt, vhost, component))


@endpoint()
async def show_parameter(request: Request, mgmt: Management, user: Account) -> Response:
    """One parameter; 404 when unknown."""
    component = _component(request)
    vhost, name = path_vhost(request), path_vhost(request, "name")
    if component != "shovel":
        value = federation_of(mgmt).get(vhost, component, name)
        if value is None:
            raise not_found()
        return json_response({"value": value, "vhost": vhost, "component": component,
                              "name": name})
    d = shovels_of(mgmt).get(vhost, name)
    if d is None:
        raise not_found()
    return json_response({"value": d.value, "vhost": d.vhost, "component": "shovel",
                          "name": d.name})


@endpoint("policymaker")
async def put_parameter(request: Request, mgmt: Management, user: Account) -> Response:
    """Set a parameter: 201 / 204; 400 with RabbitMQ's validation text; 404 unknown vhost."""
    component = _component(request)
    vhost, name = vhost_and_name(request, mgmt)
    body = await read_json(request)
    return created() if _put(mgmt, component, vhost, name, body.get("value")) else no_content()


def _put(mgmt: Management, component: str, vhost: str, name: str, value: object) -> bool:
    """Set a parameter of ``component``; True when new. ``HTTPError`` 400 when refused."""
    try:
        if component == "shovel":
            return shovels_of(mgmt).put(validate(vhost, name, value))
        return federation_of(mgmt).put(vhost, component, name, value)
    except (ShovelParamError, FederationParamError) as exc:
        raise validation_failed(str(exc)) from None


@endpoint("policymaker")
async def delete_parameter(request: Request, mgmt: Management, user: Account) -> Response:
    """Clear a parameter: 204, 404 when unknown."""
    component = _component(request)
    vhost, name = path_vhost(request), path_vhost(request, "name")
    if not (shovels_of(mgmt).delete(vhost, name) if component == "shovel"
            else federation_of(mgmt).delete(vhost, component, name)):
        raise not_found()
    return no_content()


def import_parameters(mgmt: Management, items: list[dict], only_vhost: str | None = None) -> None:
    """Set the ``shovel`` and federation parameters of a definitions file (``{"component",
    "vhost", "name", "value"}`` each; other components are skipped, as this broker has none).
    Raises ``HTTPError`` 400 for a refused value or an unknown vhost."""
    for item in items:
        if item.get("component") not in COMPONENTS:
            continue
        vhost = only_vhost or str(item.get("vhost", "/"))
        if vhost not in mgmt.broker.vhosts:
            raise HTTPError(400, "bad_request", f"vhost '{vhost}' does not exist")
        _put(mgmt, str(item["component"]), vhost, str(item.get("name", "")), item.get("value"))


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
