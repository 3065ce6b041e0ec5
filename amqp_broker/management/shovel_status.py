"""``GET /api/shovels`` in a cluster: every member answers with the status of the member that runs
the shovels (``shovel.manager.runner``, the metadata leader), as RabbitMQ's answer lists each
shovel once with the node that runs it and its state there (``rabbit_shovel_mgmt`` asks every
node's ``rabbit_shovel_status``).

Owns ``runner_status``: this member asks the runner's management API (its HTTP listener, as
``peers.peer_listeners`` learns it) for ``/api/shovels`` with the client's own
``Authorization`` header and ``local=1`` (answer from your own state: no member forwards a
forwarded request, so two members that each take the other for the runner during a leader
change do not ask each other in a loop), within ``TIMEOUT_S`` seconds, in a worker thread.
None (the caller answers from its own state, where a shovel run elsewhere is ``terminated``
with the reason naming the runner) when: not clustered, this member runs the shovels or knows
no runner, the runner has no plain-HTTP listener (``https`` is not followed) or does not answer.
Source: RabbitMQ rabbitmq_shovel_management (``/api/shovels``), "Dynamic Shovels".
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

import anyio.to_thread

from ..shovel.manager import runner
from .context import Management
from .peers import peer_listeners

__all__ = ["runner_status", "TIMEOUT_S", "LOCAL"]

#: seconds to wait for the runner's answer
TIMEOUT_S = 2.0
#: the query parameter of a forwarded request: answer from this member's own state
LOCAL = "local"


async def runner_status(mgmt: Management, authorization: str | None,
                        vhost: str | None) -> list[dict[str, Any]] | None:
    """The shovels (of ``vhost``) as the member that runs them lists them, or None (module
    docstring). Never raises for a member that fails to answer."""
    broker = mgmt.broker
    who = runner(broker)
    if broker.metadata is None or not authorization or who is None \
            or who == broker.settings.node_name:
        return None
    web = next((x for x in await peer_listeners(mgmt)
                if x["node"] == who and x["protocol"] == "http"), None)
    if web is None:
        return None
    path = "/api/shovels" + (f"/{quote(vhost, safe='')}" if vhost is not None else "")
    url = f"http://{web['ip_address']}:{web['port']}{path}?{LOCAL}=1"
    request = urllib.request.Request(url, headers={"Authorization": authorization})

    def get() -> Any:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as resp:
            return json.loads(resp.read())

    try:
        items = await anyio.to_thread.run_sync(get, abandon_on_cancel=True)
    except (OSError, ValueError):   # refused, timed out, an HTTP error, not JSON
        return None
    if not isinstance(items, list):
        return None
    return [item for item in items if isinstance(item, dict) and item.get("node") == who]
