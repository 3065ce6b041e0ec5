"""Maintenance mode and leader rebalancing over HTTP (``management.maintenance``), called by
``amqp-broker ctl drain / revive / rebalance``:

    POST /api/maintenance/drain    -> 200 {"node", "connections_closed", "leaders_transferred",
                                           "leaders_remaining"}
    POST /api/maintenance/revive   -> 200 {"node"}
    POST /api/rebalance/queues     -> 200 [{"Node name", "Number of quorum queues"}]
    GET  /api/health/checks/node-is-quorum-critical
                                   -> 200 {"status": "ok"} (with "reason": "single node
                                      cluster" alone), or 503 {"status": "failed", "reason":
                                      ..., "queues": [...]} (RabbitMQ's route and answers)

Drain and revive act on the broker that answers (RabbitMQ's ``rabbitmq-upgrade drain`` /
``revive`` act on the node the CLI names; RabbitMQ's HTTP API has no route for them, these are
ours). ``/api/rebalance/queues`` is RabbitMQ's route (3.9+), which answers 204 and rebalances
in the background; ours answers when the moves are done, with the leaders per member
(``rabbitmq-queues rebalance quorum``'s table). Administrator only, but the health check (any
management user, as RabbitMQ's). ``GET /api/nodes`` shows
``being_drained`` (RabbitMQ's field) for every member, as each says it now.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.access import Account
from . import maintenance
from .api import endpoint
from .context import Management
from .http import json_response
from .node import cluster_view

__all__ = ["ROUTES"]


@endpoint("administrator")
async def drain(request: Request, mgmt: Management, user: Account) -> Response:
    """``POST /api/maintenance/drain``: ``maintenance.drain``'s answer (200)."""
    return json_response(await maintenance.drain(mgmt))


@endpoint("administrator")
async def revive(request: Request, mgmt: Management, user: Account) -> Response:
    """``POST /api/maintenance/revive``: ``{"node"}`` (200)."""
    return json_response(maintenance.revive(mgmt))


@endpoint("administrator")
async def rebalance(request: Request, mgmt: Management, user: Account) -> Response:
    """``POST /api/rebalance/queues``: the leaders per member after the moves (200)."""
    return json_response(await maintenance.rebalance(mgmt))


@endpoint()
async def quorum_critical(request: Request, mgmt: Management, user: Account) -> Response:
    """``GET /api/health/checks/node-is-quorum-critical``: 200 ok, or 503 with the queues."""
    if len(cluster_view(mgmt)["member_names"]) <= 1:
        return json_response({"status": "ok", "reason": "single node cluster"})
    queues = maintenance.quorum_critical(mgmt)
    if not queues:
        return json_response({"status": "ok"})
    return json_response({"status": "failed", "reason": "There are quorum queues that would "
                          "lose their quorum if the target node is shut down",
                          "queues": queues}, 503)


ROUTES = [
    Route("/api/maintenance/drain", drain, methods=["POST"]),
    Route("/api/maintenance/revive", revive, methods=["POST"]),
    Route("/api/rebalance/queues", rebalance, methods=["POST"]),
    Route("/api/health/checks/node-is-quorum-critical", quorum_critical),
]
