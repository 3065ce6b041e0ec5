"""``/api/exchanges`` and ``/api/bindings``: list, show, declare (PUT), delete, publish, and the
bindings between exchanges and queues (``POST /api/bindings/{vhost}/e/{source}/q/{queue}``
answers 201 with a ``Location`` naming the new binding by its properties key).

The default exchange is "" in listings and ``amq.default`` in URLs, as RabbitMQ. Changes go
through ``direct`` (Exchange.Declare / Delete / Bind, Queue.Bind / Unbind, Basic.Publish with
confirms and mandatory: ``{"routed": false}`` when no queue took the message). Source:
"Management HTTP API" (/api/exchanges/vhost/name/publish, /api/bindings/vhost/e/exchange/q/queue).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any
from urllib.parse import quote

from pamqp import commands as cmd
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from routing.binding import Binding
from routing.destination import Destination

from ..core.access import Account
from ..protocol import constants as c
from . import auth
from .api import amqp, endpoint, vhost_of
from .cluster_stats import quoted, summed_item, summed_items
from .context import Management
from .direct import AMQPError
from .http import (
    HTTPError,
    created,
    flag,
    json_response,
    list_response,
    no_content,
    not_found,
    path_vhost,
    read_json,
    require_keys,
)
from .object_rates import exchange_counters
from .shapes import binding_json, exchange_json

__all__ = ["ROUTES", "exchange_items", "binding_items", "properties_from_json"]


def _name(request: Request, key: str = "name") -> str:
    name = path_vhost(request, key)
    return "" if name == "amq.default" else name


def exchange_items(mgmt: Management, user: Account, vhost: str | None = None) -> list[dict]:
    """Every exchange ``user`` may see (of ``vhost`` only, when given), with its message
    rates."""
    broker = mgmt.broker
    names = [vhost] if vhost is not None else auth.visible_vhosts(user, broker.access,
                                                                  list(broker.vhosts))
    return [_with_stats(mgmt, v, ex) for v in names
            for ex in broker.vhosts[v].routing.exchanges()]


def _with_stats(mgmt: Management, vhost: str, ex: Any) -> dict:
    """``exchange_json`` with the exchange's counts and rates (``object_rates``)."""
    counts = exchange_counters(mgmt.broker.vhosts[vhost], ex)
    rates = (mgmt.sampler.objects.exchange(ex)
             if counts is not None and mgmt.sampler is not None else {})
    return exchange_json(vhost, ex, counts, rates)


def binding_items(mgmt: Management, user: Account, vhost: str | None = None) -> list[dict]:
    """Every binding ``user`` may see, the default exchange's implicit ones first per vhost."""
    broker = mgmt.broker
    names = [vhost] if vhost is not None else auth.visible_vhosts(user, broker.access,
                                                                  list(broker.vhosts))
    return [binding_json(v, b) for v in names
            for b in broker.vhosts[v].routing.bindings(include_default=True)]


@endpoint()
async def list_exchanges(request: Request, mgmt: Management, user: Account) -> Response:
    """Every exchange (of ``{vhost}``), its ``message_stats`` summed over the cluster's members
    (``cluster_stats``)."""
    vhost = vhost_of(request, mgmt, user) if "vhost" in request.path_params else None
    path = "/api/exchanges" + (quoted(vhost) if vhost is not None else "")
    return list_response(request, await summed_items(request, mgmt, path,
                                                     exchange_items(mgmt, user, vhost)))


def _exchange(request: Request, mgmt: Management, user: Account) -> tuple[str, Any]:
    vhost = vhost_of(request, mgmt, user)
    ex = mgmt.broker.vhosts[vhost].routing.get_exchange(_name(request))
    if ex is None:
        raise not_found()
    return vhost, ex


@endpoint()
async def show_exchange(request: Request, mgmt: Management, user: Account) -> Response:
    """One exchange with its ``message_stats``, and RabbitMQ's ``incoming`` and ``outgoing``
    (per-channel and per-queue message rates: [] here, as RabbitMQ's with rates_mode basic);
    its ``message_stats`` summed over the cluster's members (``cluster_stats``)."""
    vhost, ex = _exchange(request, mgmt, user)
    path = "/api/exchanges" + quoted(vhost, ex.name or "amq.default")
    item = await summed_item(request, mgmt, path, _with_stats(mgmt, vhost, ex))
    return json_response({**item, "incoming": [], "outgoing": []})


@endpoint()
async def put_exchange(request: Request, mgmt: Management, user: Account) -> Response:
    vhost = vhost_of(request, mgmt, user)
    name = _name(request)
    body = await read_json(request)
    existed = mgmt.broker.vhosts[vhost].routing.get_exchange(name) is not None
    with amqp(request, mgmt, user, vhost) as ch:
        await ch.open()
        await ch.call(cmd.Exchange.Declare(
            # no type: "direct", as RabbitMQ 3.10 answers
            exchange=name, exchange_type=str(body.get("type") or "direct"), durable=flag(body, "durable", True),
            auto_delete=flag(body, "auto_delete", False),
            internal=flag(body, "internal", False), arguments=body.get("arguments") or {}),
            cmd.Exchange.DeclareOk)
    return no_content() if existed else created()


@endpoint()
async def delete_exchange(request: Request, mgmt: Management, user: Account) -> Response:
    vhost, ex = _exchange(request, mgmt, user)
    with amqp(request, mgmt, user, vhost) as ch:
        await ch.open()
        await ch.call(cmd.Exchange.Delete(exchange=ex.name, if_unused=request.query_params.get(
            "if-unused") == "true"), cmd.Exchange.DeleteOk)
    return no_content()


_PROPS = set(cmd.Basic.Properties.__slots__)  # type: ignore[attr-defined]


def properties_from_json(props: dict[str, Any]) -> cmd.Basic.Properties:
    """Basic.Properties from the API's ``properties`` object (unknown keys: 400)."""
    kwargs = {}
    for key, value in props.items():
        attr = "message_type" if key == "type" else key
        if attr not in _PROPS:
            raise HTTPError(400, "bad_request", f"unknown property: {key}")
        kwargs[attr] = value
    try:
        return cmd.Basic.Properties(**kwargs)
    except (TypeError, ValueError) as exc:
        raise HTTPError(400, "bad_request", f"bad properties: {exc}") from None


@endpoint()
async def publish(request: Request, mgmt: Management, user: Account) -> Response:
    """RabbitMQ 3.10's answers: 400 for a missing key, and 400 with the channel's "404
    NOT_FOUND - no exchange ..." for an exchange that does not exist."""
    vhost = vhost_of(request, mgmt, user)
    body = await read_json(request)
    require_keys(body, ("routing_key", "properties", "payload", "payload_encoding"))
    ex = mgmt.broker.vhosts[vhost].routing.get_exchange(_name(request))
    if ex is None:
        raise HTTPError(400, "bad_request", f"404 NOT_FOUND - no exchange "
                        f"'{path_vhost(request, 'name')}' in vhost '{vhost}'")
    payload = body["payload"]
    if body["payload_encoding"] == "base64":
        try:
            data = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise HTTPError(400, "bad_request", "payload is not base64") from None
    elif body["payload_encoding"] == "string":
        data = str(payload).encode("utf-8")
    else:
        raise HTTPError(400, "bad_request", "payload_encoding must be string or base64")
    props = properties_from_json(body.get("properties") or {})
    with amqp(request, mgmt, user, vhost) as ch:
        await ch.open()
        routed = await ch.publish(ex.name, str(body["routing_key"]), data, props)
    return json_response({"routed": routed})


@endpoint()
async def exchange_bindings(request: Request, mgmt: Management, user: Account) -> Response:
    vhost, ex = _exchange(request, mgmt, user)
    routing = mgmt.broker.vhosts[vhost].routing
    if request.url.path.endswith("/source"):
        found = list(routing.bindings_from(ex.name))
    else:
        found = list(routing.bindings_to(Destination("exchange", ex.name)))
    return list_response(request, [binding_json(vhost, b) for b in found])


@endpoint()
async def list_bindings(request: Request, mgmt: Management, user: Account) -> Response:
    vhost = vhost_of(request, mgmt, user) if "vhost" in request.path_params else None
    return list_response(request, binding_items(mgmt, user, vhost))


def _ends(request: Request, mgmt: Management, user: Account) -> tuple[str, str, Destination]:
    vhost = vhost_of(request, mgmt, user)
    if request.path_params["kind"] not in ("q", "e"):
        raise not_found()
    dest = path_vhost(request, "dest")
    found = Destination("queue", dest) if request.path_params["kind"] == "q" else \
        Destination("exchange", dest)
    return vhost, _name(request, "source"), found


def _matching(mgmt: Management, vhost: str, source: str, dest: Destination) -> list[dict]:
    routing = mgmt.broker.vhosts[vhost].routing
    return [binding_json(vhost, b) for b in routing.bindings_to(dest, include_default=True)
            if b.source == source]


@endpoint()
async def pair_bindings(request: Request, mgmt: Management, user: Account) -> Response:
    vhost, source, dest = _ends(request, mgmt, user)
    return list_response(request, _matching(mgmt, vhost, source, dest))


async def _bind(request: Request, mgmt: Management, user: Account, vhost: str, source: str,
                dest: Destination, key: str, args: dict, unbind: bool) -> None:
    method: Any
    if dest.kind == "queue":
        method = (cmd.Queue.Unbind(queue=dest.name, exchange=source, routing_key=key,
                                   arguments=args) if unbind else
                  cmd.Queue.Bind(queue=dest.name, exchange=source, routing_key=key,
                                 arguments=args))
        reply: type = cmd.Queue.UnbindOk if unbind else cmd.Queue.BindOk
    else:
        method = (cmd.Exchange.Unbind if unbind else cmd.Exchange.Bind)(
            destination=dest.name, source=source, routing_key=key, arguments=args)
        reply = cmd.Exchange.UnbindOk if unbind else cmd.Exchange.BindOk
    with amqp(request, mgmt, user, vhost) as ch:
        await ch.open()
        await ch.call(method, reply)


@endpoint()
async def create_binding(request: Request, mgmt: Management, user: Account) -> Response:
    vhost, source, dest = _ends(request, mgmt, user)
    body = await read_json(request)
    key = str(body.get("routing_key", ""))
    args = body.get("arguments") or {}
    try:
        await _bind(request, mgmt, user, vhost, source, dest, key, args, unbind=False)
    except AMQPError as exc:  # RabbitMQ 3.10: {"error": "not_found", "reason": "no queue ..."}
        if exc.code != c.NOT_FOUND:
            raise
        raise HTTPError(404, "not_found", exc.text.split(" - ", 1)[-1]) from None
    props = binding_json(vhost, Binding(source, dest, key, args))["properties_key"]
    e = "amq.default" if not source else source
    location = (f"/api/bindings/{quote(vhost, safe='')}/e/{quote(e, safe='')}/"
                f"{request.path_params['kind']}/{quote(dest.name, safe='')}/"
                f"{quote(props, safe='~')}")
    return created(location)


def _find(request: Request, mgmt: Management, user: Account) -> tuple[str, str, Destination,
                                                                      dict]:
    vhost, source, dest = _ends(request, mgmt, user)
    props = path_vhost(request, "props")
    for b in _matching(mgmt, vhost, source, dest):
        if b["properties_key"] == props:
            return vhost, source, dest, b
    raise not_found()


@endpoint()
async def show_binding(request: Request, mgmt: Management, user: Account) -> Response:
    return json_response(_find(request, mgmt, user)[3])


@endpoint()
async def delete_binding(request: Request, mgmt: Management, user: Account) -> Response:
    vhost, source, dest, b = _find(request, mgmt, user)
    await _bind(request, mgmt, user, vhost, source, dest, b["routing_key"],
                _raw_args(mgmt, vhost, source, dest, b["properties_key"]), unbind=True)
    return no_content()


def _raw_args(mgmt: Management, vhost: str, source: str, dest: Destination, props: str) -> dict:
    """The binding's arguments as stored (typed), found by its properties key."""
    routing = mgmt.broker.vhosts[vhost].routing
    for b in routing.bindings_to(dest):
        if b.source == source and binding_json(vhost, b)["properties_key"] == props:
            return dict(b.arguments or {})
    return {}


ROUTES = [
    Route("/api/exchanges", list_exchanges),
    Route("/api/exchanges/{vhost}", list_exchanges),
    Route("/api/exchanges/{vhost}/{name}", show_exchange, methods=["GET"]),
    Route("/api/exchanges/{vhost}/{name}", put_exchange, methods=["PUT"]),
    Route("/api/exchanges/{vhost}/{name}", delete_exchange, methods=["DELETE"]),
    Route("/api/exchanges/{vhost}/{name}/publish", publish, methods=["POST"]),
    Route("/api/exchanges/{vhost}/{name}/bindings/source", exchange_bindings),
    Route("/api/exchanges/{vhost}/{name}/bindings/destination", exchange_bindings),
    Route("/api/bindings", list_bindings),
    Route("/api/bindings/{vhost}", list_bindings),
    Route("/api/bindings/{vhost}/e/{source}/{kind:str}/{dest}", pair_bindings, methods=["GET"]),
    Route("/api/bindings/{vhost}/e/{source}/{kind:str}/{dest}", create_binding,
          methods=["POST"]),
    Route("/api/bindings/{vhost}/e/{source}/{kind:str}/{dest}/{props}", show_binding,
          methods=["GET"]),
    Route("/api/bindings/{vhost}/e/{source}/{kind:str}/{dest}/{props}", delete_binding,
          methods=["DELETE"]),
]
