"""Ask the other cluster members' management APIs, in parallel and bounded: what a member's
answer needs from the others (``shovel_status``: the shovels' runner's status; ``cluster_stats``:
the queues', exchanges' and overview's figures summed over the members, as RabbitMQ's management
API shows them for the whole cluster).

Owns ``ask_members``: a GET of ``path`` on every other member of this node's view (or the
``nodes`` named) at its plain-HTTP management listener (``peers.peer_listeners``: its ``https``
one is not followed), with the client's own ``Authorization`` header and ``?local=1``
(``LOCAL``: the member answers from its own state and forwards nothing, so two members never
ask each other in a loop), all members at once (an anyio task group, one worker thread per
member), the whole within ``TIMEOUT_S`` seconds. A member that does not answer in time, refuses,
answers with an HTTP error or not with JSON is left out, silently: RabbitMQ's management API
omits a down node's figures the same way. Source: RabbitMQ "Management HTTP API" (a node's
answer covers the cluster), rabbitmq_shovel_management (``/api/shovels``).
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterable
from typing import Any

import anyio
import anyio.to_thread
from starlette.requests import Request

from .context import Management
from .peers import peer_listeners

__all__ = ["ask_members", "forwarded", "TIMEOUT_S", "LOCAL"]

#: seconds to wait for the other members' answers (all of them together)
TIMEOUT_S = 2.0
#: the query parameter of a forwarded request: answer from this member's own state
LOCAL = "local"


def forwarded(request: Request) -> bool:
    """True for a request another member forwarded (``?local=1``): answer it from this member's
    own state only."""
    return LOCAL in request.query_params


async def ask_members(mgmt: Management, authorization: str | None, path: str,
                      nodes: Iterable[str] | None = None) -> dict[str, Any]:
    """Node name -> the decoded JSON answer of ``GET <path>?local=1`` (``path`` starts with
    ``/api/``, already percent-encoded, without a query) from each other member (of ``nodes``
    only, when given) that answered within ``TIMEOUT_S`` seconds (module docstring). {} when
    this broker is not clustered or the caller sent no ``Authorization``. Never raises for a
    member that fails to answer."""
    if mgmt.broker.metadata is None or not authorization:
        return {}
    wanted = None if nodes is None else set(nodes)
    webs = [x for x in await peer_listeners(mgmt) if x["protocol"] == "http"
            and (wanted is None or x["node"] in wanted)]
    out: dict[str, Any] = {}

    async def one(node: str, url: str) -> None:
        request = urllib.request.Request(url, headers={"Authorization": authorization})

        def get() -> Any:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:
                return json.loads(resp.read())

        try:
            out[node] = await anyio.to_thread.run_sync(get, abandon_on_cancel=True)
        except (OSError, ValueError):   # refused, timed out, an HTTP error, not JSON
            pass

    with anyio.move_on_after(TIMEOUT_S):
        async with anyio.create_task_group() as tg:
            for web in webs:
                url = f"http://{web['ip_address']}:{web['port']}{path}?{LOCAL}=1"
                tg.start_soon(one, web["node"], url)
    return out
