"""``/api/queues``: list (all, per vhost), show, declare (PUT), delete, purge
(``DELETE .../contents``), get messages (``POST .../get``) and a queue's bindings.

Changes go through ``direct`` (the broker's own Queue.Declare / Delete / Purge and Basic.Get
handlers). Source: "Management HTTP API" (/api/queues/vhost/name, /contents, /get).
Answers: PUT 201 when created, 204 when it existed (406 inequivalent -> 400); DELETE 204;
``if-unused`` / ``if-empty`` query flags as Queue.Delete's.
"""

from __future__ import annotations

import base64
from typing import Any

from pamqp import commands as cmd
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.access import Account
from ..core.stats import queue_message_stats
from . import auth
from .api import amqp, endpoint, vhost_of
from .cluster_stats import quoted, summed_item, summed_items
from .context import Management
from .direct import GotMessage
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
from .routes_conns import consumer_items
from .shapes import binding_json, jsonable, queue_json

__all__ = ["ROUTES", "queue_items", "properties_json"]


def queue_items(mgmt: Management, user: Account, vhost: str | None = None) -> list[dict]:
    """Every queue ``user`` may see (of ``vhost`` only, when given), as ``queue_json``."""
    broker = mgmt.broker
    names = [vhost] if vhost is not None else auth.visible_vhosts(user, broker.access,
                                                                  list(broker.vhosts))
    rates = mgmt.sampler.objects.queue if mgmt.sampler is not None else (lambda q: {})
    queues = [(v, q) for v in names for q in list(broker.vhosts[v].queues.values())]
    stats = queue_message_stats(broker, (q for _v, q in queues))
    return [queue_json(broker, v, q, rates(q), stats=stats.get(q)) for v, q in queues]


@endpoint()
async def list_queues(request: Request, mgmt: Management, user: Account) -> Response:
    """Every queue (of ``{vhost}``), its ``message_stats`` summed over the cluster's members
    (``cluster_stats``)."""
    vhost = vhost_of(request, mgmt, user) if "vhost" in request.path_params else None
    path = "/api/queues" + (quoted(vhost) if vhost is not None else "")
    return list_response(request, await summed_items(request, mgmt, path,
                                                     queue_items(mgmt, user, vhost)))


def _queue(request: Request, mgmt: Management, user: Account) -> tuple[str, Any]:
    vhost = vhost_of(request, mgmt, user)
    q = mgmt.broker.vhosts[vhost].queues.get(path_vhost(request, "name"))
    if q is None:
        raise not_found()
    return vhost, q


@endpoint()
async def show_queue(request: Request, mgmt: Management, user: Account) -> Response:
    """One queue, with what RabbitMQ adds to a single queue's answer: ``consumer_details`` (its
    consumers, as in ``/api/consumers``), ``incoming`` and ``deliveries`` (per-channel message
    rates: [] here, as RabbitMQ's with rates_mode basic); its ``message_stats`` summed over the
    cluster's members (``cluster_stats``)."""
    vhost, q = _queue(request, mgmt, user)
    consumers = [c for c in consumer_items(mgmt, user, vhost) if c["queue"]["name"] == q.name]
    rates = mgmt.sampler.objects.queue(q) if mgmt.sampler is not None else {}
    stats = queue_message_stats(mgmt.broker, [q]).get(q)
    item = await summed_item(request, mgmt, "/api/queues" + quoted(vhost, q.name),
                             queue_json(mgmt.broker, vhost, q, rates, stats=stats))
    return json_response({**item, "consumer_details": consumers,
                          "incoming": [], "deliveries": []})


@endpoint()
async def put_queue(request: Request, mgmt: Management, user: Account) -> Response:
    vhost = vhost_of(request, mgmt, user)
    name = path_vhost(request, "name")
    body = await read_json(request)
    arguments = body.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise HTTPError(400, "bad_request", "arguments must be an object")
    existed = name in mgmt.broker.vhosts[vhost].queues
    with amqp(request, mgmt, user, vhost) as ch:
        await ch.open()
        await ch.call(cmd.Queue.Declare(queue=name, durable=flag(body, "durable", True),
                                        auto_delete=flag(body, "auto_delete", False),
                                        arguments=arguments), cmd.Queue.DeclareOk)
    return no_content() if existed else created()


@endpoint()
async def delete_queue(request: Request, mgmt: Management, user: Account) -> Response:
    vhost, q = _queue(request, mgmt, user)
    params = request.query_params
    with amqp(request, mgmt, user, vhost) as ch:
        await ch.open()
        await ch.call(cmd.Queue.Delete(queue=q.name,
                                       if_unused=params.get("if-unused") == "true",
                                       if_empty=params.get("if-empty") == "true"),
                      cmd.Queue.DeleteOk)
    return no_content()


@endpoint()
async def purge_queue(request: Request, mgmt: Management, user: Account) -> Response:
    vhost, q = _queue(request, mgmt, user)
    with amqp(request, mgmt, user, vhost) as ch:
        await ch.open()
        await ch.call(cmd.Queue.Purge(queue=q.name), cmd.Queue.PurgeOk)
    return no_content()


def properties_json(props: cmd.Basic.Properties) -> dict[str, Any]:
    """The set properties of a message, as RabbitMQ's API shows them."""
    out = {}
    for key in props.__slots__:  # type: ignore[attr-defined]
        value = getattr(props, key, None)
        if value is not None and not (key == "cluster_id" and value == ""):
            out["type" if key == "message_type" else key] = jsonable(value)
    return out


_ACKMODES = ("ack_requeue_true", "ack_requeue_false", "reject_requeue_true",
             "reject_requeue_false")


def _payload(body: bytes, encoding: str, truncate: int | None) -> tuple[str, str]:
    data = body[:truncate] if truncate is not None else body
    if encoding == "auto":
        try:
            return data.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(data).decode("ascii"), "base64"


@endpoint()
async def get_messages(request: Request, mgmt: Management, user: Account) -> Response:
    """RabbitMQ 3.10's answers: 400 unless count, ackmode and encoding are given; 404
    ``{"error": "not_found", "reason": "NOT_FOUND - no queue ..."}`` for a missing queue."""
    vhost = vhost_of(request, mgmt, user)
    body = await read_json(request)
    require_keys(body, ("count", "ackmode", "encoding"))
    q = mgmt.broker.vhosts[vhost].queues.get(path_vhost(request, "name"))
    if q is None:
        raise HTTPError(404, "not_found", f"NOT_FOUND - no queue '{path_vhost(request, 'name')}'"
                        f" in vhost '{vhost}'")
    try:
        count = int(body.get("count", 1))
        truncate = int(body["truncate"]) if body.get("truncate") not in (None, "") else None
    except (TypeError, ValueError):
        raise HTTPError(400, "bad_request", "count and truncate must be integers") from None
    ackmode, encoding = body["ackmode"], body["encoding"]
    if ackmode not in _ACKMODES:
        raise HTTPError(400, "bad_request", f"Unknown ackmode: {ackmode}")
    if encoding not in ("auto", "base64"):
        raise HTTPError(400, "bad_request", f"Unsupported encoding: {encoding}")
    out = []
    with amqp(request, mgmt, user, vhost) as ch:
        await ch.open()
        last_tag = 0
        for _ in range(max(0, min(count, 10000))):
            got = await ch.call(cmd.Basic.Get(queue=q.name), cmd.Basic.GetOk, cmd.Basic.GetEmpty)
            if not isinstance(got, GotMessage):
                break
            m = got.method
            last_tag = m.delivery_tag
            payload, enc = _payload(got.body, encoding, truncate)
            out.append({"payload_bytes": len(got.body), "redelivered": m.redelivered,
                        "exchange": m.exchange, "routing_key": m.routing_key,
                        "message_count": m.message_count,
                        "properties": properties_json(got.properties),
                        "payload": payload, "payload_encoding": enc})
        if last_tag:
            if ackmode == "ack_requeue_false":
                ch.send(cmd.Basic.Ack(delivery_tag=last_tag, multiple=True))
            else:
                ch.send(cmd.Basic.Nack(delivery_tag=last_tag, multiple=True,
                                       requeue=ackmode != "reject_requeue_false"))
    return json_response(out)


@endpoint()
async def queue_bindings(request: Request, mgmt: Management, user: Account) -> Response:
    vhost, q = _queue(request, mgmt, user)
    routing = mgmt.broker.vhosts[vhost].routing
    return list_response(request, [binding_json(vhost, b) for b in
                                   routing.bindings_of_queue(q.name, include_default=True)])


ROUTES = [
    Route("/api/queues", list_queues),
    Route("/api/queues/{vhost}", list_queues),
    Route("/api/queues/{vhost}/{name}", show_queue, methods=["GET"]),
    Route("/api/queues/{vhost}/{name}", put_queue, methods=["PUT"]),
    Route("/api/queues/{vhost}/{name}", delete_queue, methods=["DELETE"]),
    Route("/api/queues/{vhost}/{name}/contents", purge_queue, methods=["DELETE"]),
    Route("/api/queues/{vhost}/{name}/get", get_messages, methods=["POST"]),
    Route("/api/queues/{vhost}/{name}/bindings", queue_bindings),
]
