"""Replica management of quorum queues over HTTP, with the routes of RabbitMQ's management API
(3.13/4.x: ``rabbit_mgmt_wm_quorum_queue_replicas_*``); ``amqp-broker ctl add_member /
delete_member / grow / shrink`` call them.

    POST   /api/queues/quorum/{vhost}/{name}/replicas/add      {"node": N}          -> 204
    DELETE /api/queues/quorum/{vhost}/{name}/replicas/delete   {"node": N}          -> 202
    POST   /api/queues/quorum/replicas/on/{node}/grow
           {"strategy": "all"|"even", "vhost_pattern": ".*", "queue_pattern": ".*"} -> 200 [results]
    DELETE /api/queues/quorum/replicas/on/{node}/shrink                              -> 200 [results]

Add and delete answer once the broker asked sees the committed configuration show the change
(adding a member or deleting a non-member: at once, as RabbitMQ). Errors as RabbitMQ's: 404 for
an unknown queue; 503 ``service_unavailable`` with the reason (``node_not_running``,
``last_node``, ``classic_queue_not_supported`` for a queue that is not replicated, ``timeout``)
for a refused change; 400 for a bad body. Grow and shrink answer per queue (vhost, name, size,
result): RabbitMQ answers 204/202 with no body and prints such a table in rabbitmq-queues.
Administrator only, as RabbitMQ's. The work is ``amqp_broker.clustering.quorum_members``.

Replicated streams the same way (``amqp-broker ctl add_replica / delete_replica``, RabbitMQ's
``rabbitmq-streams add_replica / delete_replica``, which RabbitMQ's HTTP API does not offer: the
routes are ours, shaped as the quorum queues' above; the work is
``amqp_broker.clustering.stream_members``)::

    POST   /api/queues/stream/{vhost}/{name}/replicas/add      {"node": N}          -> 204
    DELETE /api/queues/stream/{vhost}/{name}/replicas/delete   {"node": N}          -> 202

404 for an unknown queue, 503 ``service_unavailable`` with the reason (``not_a_stream`` for a
queue that is not a replicated stream, ``node_not_running``, ``last_node``, ``timeout``).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..clustering.quorum_members import MemberError
from ..core.access import Account
from .api import endpoint, vhost_of
from .context import Management
from .http import HTTPError, json_response, no_content, not_found, path_vhost, read_json

__all__ = ["ROUTES"]

_ADD, _DELETE = 1, 2   # cluster.quorum.members.ADD / DELETE
_TIMEOUT_S = 30.0


def _unavailable(reason: str) -> HTTPError:
    return HTTPError(503, "service_unavailable", reason)


def _runtime(mgmt: Management) -> Any:
    runtime = getattr(mgmt.broker, "quorum", None)
    if runtime is None:
        raise _unavailable("quorum queues are not served by this broker")
    return runtime


async def _node(request: Request) -> str:
    body = await read_json(request)
    node = body.get("node")
    if not isinstance(node, str) or not node:
        raise HTTPError(400, "bad_request", "node must be a node name")
    return node


async def _change(request: Request, mgmt: Management, user: Account, op: int,
                  stream: bool = False) -> None:
    vhost = vhost_of(request, mgmt, user)
    name = path_vhost(request, "name")
    q = mgmt.broker.vhosts[vhost].queues.get(name)
    if q is None:
        raise not_found()
    if not getattr(q.capabilities, "replicated", False) or \
            (stream and not getattr(q, "is_stream", False)):
        raise _unavailable("not_a_stream" if stream else "classic_queue_not_supported")
    node = await _node(request)
    # a stream's replicas: amqp_broker.clustering.stream_members (same interface)
    manager = getattr(mgmt.broker.queue_types.get("stream"), "members", None) if stream \
        else _runtime(mgmt)
    if manager is None:
        raise _unavailable("not_a_stream")
    try:
        await manager.change_member(vhost, name, op, node, _TIMEOUT_S)
    except MemberError as exc:
        if exc.reason == "not_found":
            raise not_found() from None
        raise _unavailable(exc.reason) from None


@endpoint("administrator")
async def add_member(request: Request, mgmt: Management, user: Account) -> Response:
    await _change(request, mgmt, user, _ADD)
    return no_content()


@endpoint("administrator")
async def delete_member(request: Request, mgmt: Management, user: Account) -> Response:
    await _change(request, mgmt, user, _DELETE)
    return Response(status_code=202)


@endpoint("administrator")
async def add_replica(request: Request, mgmt: Management, user: Account) -> Response:
    await _change(request, mgmt, user, _ADD, stream=True)
    return no_content()


@endpoint("administrator")
async def delete_replica(request: Request, mgmt: Management, user: Account) -> Response:
    await _change(request, mgmt, user, _DELETE, stream=True)
    return Response(status_code=202)


@endpoint("administrator")
async def grow(request: Request, mgmt: Management, user: Account) -> Response:
    node = path_vhost(request, "node")
    body = await read_json(request)
    strategy = body.get("strategy", "all")
    patterns = (body.get("vhost_pattern") or ".*", body.get("queue_pattern") or ".*")
    if strategy not in ("all", "even") or not all(isinstance(p, str) for p in patterns):
        raise HTTPError(400, "bad_request", "strategy must be 'all' or 'even'; patterns strings")
    try:
        results = await _runtime(mgmt).grow(node, strategy, *patterns, timeout=_TIMEOUT_S)
    except ValueError as exc:   # re.error is a ValueError
        raise HTTPError(400, "bad_request", str(exc)) from None
    except MemberError as exc:
        raise _unavailable(exc.reason) from None
    return json_response(results)


@endpoint("administrator")
async def shrink(request: Request, mgmt: Management, user: Account) -> Response:
    node = path_vhost(request, "node")
    return json_response(await _runtime(mgmt).shrink(node, timeout=_TIMEOUT_S))


ROUTES = [
    Route("/api/queues/quorum/replicas/on/{node}/grow", grow, methods=["POST"]),
    Route("/api/queues/quorum/replicas/on/{node}/shrink", shrink, methods=["DELETE"]),
    Route("/api/queues/quorum/{vhost}/{name}/replicas/add", add_member, methods=["POST"]),
    Route("/api/queues/quorum/{vhost}/{name}/replicas/delete", delete_member,
          methods=["DELETE"]),
    Route("/api/queues/stream/{vhost}/{name}/replicas/add", add_replica, methods=["POST"]),
    Route("/api/queues/stream/{vhost}/{name}/replicas/delete", delete_replica,
          methods=["DELETE"]),
]
