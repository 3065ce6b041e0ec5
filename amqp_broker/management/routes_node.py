"""``/api/overview``, ``/api/nodes``, ``/api/cluster-name``, the health checks and the aliveness
test. Health checks answer 200 ``{"status": "ok"}`` or 503 ``{"status": "failed", "reason":
...}`` as RabbitMQ's (``/api/health/checks/alarms``, ``local-alarms``, ``virtual-hosts``,
``port-listener/{port}``, ``protocol-listener/{protocol}``); ``/api/aliveness-test/{vhost}``
declares the queue ``aliveness-test``, publishes and gets a message through the broker's own
handlers. Source: "Management HTTP API", "Monitoring" (health checks).
"""

from __future__ import annotations

from pamqp import commands as cmd
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..core.access import Account
from .api import amqp, endpoint, vhost_of
from .cluster_stats import summed_overview
from .context import Management
from .direct import GotMessage
from .http import json_response, not_found, path_vhost
from .node import cluster_view, node_json, overview_json, peer_nodes
from .peers import member_states, peer_listeners

__all__ = ["ROUTES"]


@endpoint()
async def overview(request: Request, mgmt: Management, user: Account) -> Response:
    """RabbitMQ's overview; ``listeners`` and ``contexts`` list every member's (``peers``);
    ``message_stats`` and the connection and channel totals summed over the members
    (``cluster_stats``)."""
    return json_response(await summed_overview(request, mgmt,
                                               overview_json(mgmt, await peer_listeners(mgmt))))


@endpoint("monitoring")
async def nodes(request: Request, mgmt: Management, user: Account) -> Response:
    """``GET /api/nodes``: this node, then the other members, each with ``being_drained`` as
    it says now (``peers.member_states``: a drained member shows so from every member)."""
    return json_response([node_json(mgmt), *peer_nodes(mgmt, await member_states(mgmt))])


@endpoint("monitoring")
async def node(request: Request, mgmt: Management, user: Account) -> Response:
    """``GET /api/nodes/{name}``: one of ``nodes``' items, 404 for a name not in the view."""
    name = path_vhost(request, "name")
    me = mgmt.broker.settings.node_name
    states = {} if name == me else await member_states(mgmt)
    for item in [node_json(mgmt), *peer_nodes(mgmt, states)]:
        if item["name"] == name:
            return json_response(item)
    raise not_found()


@endpoint()
async def cluster_name(request: Request, mgmt: Management, user: Account) -> Response:
    return json_response({"name": cluster_view(mgmt)["cluster_name"]})


@endpoint()
async def cluster_status(request: Request, mgmt: Management, user: Account) -> Response:
    """Our own: the view number, members (host:port, names), leader (first)."""
    return json_response(cluster_view(mgmt))


def _failed(reason: str, **extra: object) -> Response:
    return json_response({"status": "failed", "reason": reason, **extra}, 503)


@endpoint("monitoring")
async def check_alarms(request: Request, mgmt: Management, user: Account) -> Response:
    alarms = sorted(mgmt.broker.alarms)
    if alarms:
        node_name = mgmt.broker.settings.node_name
        return _failed("resource alarm(s) in effect in the cluster",
                       alarms=[{"node": node_name, "resource": a} for a in alarms])
    return json_response({"status": "ok"})


@endpoint("monitoring")
async def check_vhosts(request: Request, mgmt: Management, user: Account) -> Response:
    return json_response({"status": "ok"})


@endpoint("monitoring")
async def check_port(request: Request, mgmt: Management, user: Account) -> Response:
    try:
        port = int(request.path_params["port"])
    except ValueError:
        return json_response({"error": "bad_request", "reason": "not a port"}, 400)
    ports = [x.port for x in mgmt.listeners]
    if port in ports:
        return json_response({"status": "ok", "port": port})
    return _failed("No active listener", missing=port, ports=ports)


@endpoint("monitoring")
async def check_protocol(request: Request, mgmt: Management, user: Account) -> Response:
    protocol = request.path_params["protocol"]
    protocols = [x.protocol for x in mgmt.listeners]
    if protocol in protocols:
        return json_response({"status": "ok", "protocol": protocol})
    return _failed(f"No active listener for protocol {protocol}", missing=protocol,
                   protocols=protocols)


@endpoint()
async def aliveness(request: Request, mgmt: Management, user: Account) -> Response:
    vhost = vhost_of(request, mgmt, user)
    with amqp(request, mgmt, user, vhost) as ch:
        await ch.open()
        await ch.call(cmd.Queue.Declare(queue="aliveness-test"), cmd.Queue.DeclareOk)
        await ch.publish("", "aliveness-test", b"test_message", cmd.Basic.Properties())
        got = await ch.call(cmd.Basic.Get(queue="aliveness-test", no_ack=True),
                            cmd.Basic.GetOk, cmd.Basic.GetEmpty)
    if not isinstance(got, GotMessage):
        return _failed("aliveness-test queue did not return the message")
    return json_response({"status": "ok"})


ROUTES = [
    Route("/api/overview", overview),
    Route("/api/nodes", nodes),
    Route("/api/nodes/{name}", node),
    Route("/api/cluster-name", cluster_name),
    Route("/api/cluster-status", cluster_status),
    Route("/api/health/checks/alarms", check_alarms),
    Route("/api/health/checks/local-alarms", check_alarms),
    Route("/api/health/checks/virtual-hosts", check_vhosts),
    Route("/api/health/checks/port-listener/{port}", check_port),
    Route("/api/health/checks/protocol-listener/{protocol}", check_protocol),
    Route("/api/aliveness-test/{vhost}", aliveness),
]
