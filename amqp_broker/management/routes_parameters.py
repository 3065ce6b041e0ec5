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
(``manager.ShovelManager.status``; in a cluster the running member's, ``shovel_status``); restart
answers 204, 404 for an unknown shovel.

In a cluster a PUT or DELETE (and a definitions import's parameters) is a command of the cluster
metadata log (``SetParameter`` / ``ClearParameter``, decided by ``cluster.metadata.parameters``
with the same validation and texts), answered once committed and applied as ``--sync-replies``
asks, or 503 ``timeout`` (RabbitMQ 4's Khepri text) when it did not commit within
``--metadata-timeout``; every member's managers follow the applied parameters (``follow``), so
a parameter set on one member is listed by all. Source: RabbitMQ "Management HTTP API"
(parameters), rabbitmq_shovel_management README, "Metadata store".
"""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cluster.metadata import commands as m
from cluster.metadata.outcomes import Deleted, Outcome, Refused, Stored
from cluster.metadata.parameters import BAD_VALUE

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
from .shovel_status import LOCAL, runner_status

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

__all__ = ["ROUTES", "validation_failed", "shovels_of", "federation_of", "import_parameters",
           "all_parameters", "follow", "run_parameters", "WATCH_INTERVAL"]

log = logging.getLogger(__name__)

#: seconds between looks for the cluster metadata log, which starts after the management API
WATCH_INTERVAL = 0.2

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


async def run_parameters(mgmt: Management, tg: TaskGroup) -> None:
    """Run the shovels and federation links this member runs (their managers' loops, in
    ``tg``); in a cluster, once its metadata log exists (the cluster starts after the
    management API: looked for every ``WATCH_INTERVAL`` seconds), the managers follow the log's
    parameters from then on (at once when this member already follows the log). Returns then;
    on a single broker it keeps looking, asleep, until cancelled."""
    shovels, federation = shovels_of(mgmt), federation_of(mgmt)
    tg.start_soon(shovels.run, tg)
    tg.start_soon(federation.run, tg)
    while mgmt.broker.metadata is None:
        await anyio.sleep(WATCH_INTERVAL)
    metadata = mgmt.broker.metadata
    metadata.on_parameters = lambda params: follow(mgmt, params)
    metadata.follow_parameters()


def follow(mgmt: Management, params: dict[tuple[str, str, str], str]) -> None:
    """Make the shovel and federation managers' parameters equal to ``params`` ((vhost,
    component, name) -> value JSON text: the metadata log's applied state)."""
    shovels, federation = {}, {}
    for (vhost, component, name), text in params.items():
        try:
            value = json.loads(text)
        except ValueError:   # the log refuses what is not JSON: never here
            log.warning("parameter %s %r of vhost %r is not JSON: skipped", component, name,
                        vhost)
            continue
        if component == "shovel":
            shovels[(vhost, name)] = value
        elif component in FEDERATION:
            federation[(vhost, component, name)] = value
    shovels_of(mgmt).follow(shovels)
    federation_of(mgmt).follow(federation)


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
    return created() if await _put(mgmt, component, vhost, name, body.get("value")) \
        else no_content()


async def _decide(mgmt: Management, command: m.Command) -> Outcome:
    """``command``'s outcome from the metadata log; raises the route's ``HTTPError``: 400
    RabbitMQ's validation text, 404, 503 ``timeout`` (not committed in time)."""
    outcome = await mgmt.broker.metadata.decide(command)
    if isinstance(outcome, Refused):
        if outcome.code == BAD_VALUE:
            raise validation_failed(outcome.text)
        if outcome.code == 404:
            raise not_found()
        raise HTTPError(503 if outcome.code == 541 else 500,
                        "timeout" if outcome.code == 541 else "internal_error", outcome.text)
    return outcome


async def _put(mgmt: Management, component: str, vhost: str, name: str, value: object) -> bool:
    """Set a parameter of ``component``; True when new. ``HTTPError`` 400 when refused."""
    if mgmt.broker.metadata is not None:
        outcome = await _decide(mgmt, m.SetParameter(component, vhost, name, json.dumps(value)))
        return isinstance(outcome, Stored) and outcome.created
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
    if mgmt.broker.metadata is not None:
        outcome = await _decide(mgmt, m.ClearParameter(component, vhost, name))
        existed = isinstance(outcome, Deleted) and outcome.existed
    else:
        existed = shovels_of(mgmt).delete(vhost, name) if component == "shovel" \
            else federation_of(mgmt).delete(vhost, component, name)
    if not existed:
        raise not_found()
    return no_content()


async def import_parameters(mgmt: Management, items: list[dict],
                            only_vhost: str | None = None) -> None:
    """Set the ``shovel`` and federation parameters of a definitions file (``{"component",
    "vhost", "name", "value"}`` each; other components are skipped, as this broker has none).
    Raises ``HTTPError`` 400 for a refused value or an unknown vhost."""
    for item in items:
        if item.get("component") not in COMPONENTS:
            continue
        vhost = only_vhost or str(item.get("vhost", "/"))
        if vhost not in mgmt.broker.vhosts:
            raise HTTPError(400, "bad_request", f"vhost '{vhost}' does not exist")
        await _put(mgmt, str(item["component"]), vhost, str(item.get("name", "")),
                   item.get("value"))


@endpoint()
async def list_shovels(request: Request, mgmt: Management, user: Account) -> Response:
    """Every shovel's status, or those of ``{vhost}``: in a cluster the runner's
    (``shovel_status.runner_status``), else this member's."""
    vhost = listed_vhost(request, mgmt)
    items = None if LOCAL in request.query_params else \
        await runner_status(mgmt, request.headers.get("authorization"), vhost)
    return list_response(request, shovels_of(mgmt).status(vhost) if items is None else items)


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
