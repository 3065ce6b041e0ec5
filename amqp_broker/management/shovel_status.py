"""``GET /api/shovels`` in a cluster: every member answers with the status of the member that runs
the shovels (``shovel.manager.runner``, the metadata leader), as RabbitMQ's answer lists each
shovel once with the node that runs it and its state there (``rabbit_shovel_mgmt`` asks every
node's ``rabbit_shovel_status``).

Owns ``runner_status``: this member asks the runner's management API for ``/api/shovels``
through ``member_apis.ask_members`` (the client's own ``Authorization``, ``?local=1`` so that no
member forwards a forwarded request and two members that each take the other for the runner
during a leader change do not ask each other in a loop, within ``TIMEOUT_S`` seconds).
None (the caller answers from its own state, where a shovel run elsewhere is ``terminated``
with the reason naming the runner) when: not clustered, this member runs the shovels or knows
no runner, the runner has no plain-HTTP listener (``https`` is not followed) or does not answer.
Source: RabbitMQ rabbitmq_shovel_management (``/api/shovels``), "Dynamic Shovels".
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ..shovel.manager import runner
from .context import Management
from .member_apis import LOCAL, TIMEOUT_S, ask_members

__all__ = ["runner_status", "TIMEOUT_S", "LOCAL"]


async def runner_status(mgmt: Management, authorization: str | None,
                        vhost: str | None) -> list[dict[str, Any]] | None:
    """The shovels (of ``vhost``) as the member that runs them lists them, or None (module
    docstring). Never raises for a member that fails to answer."""
    broker = mgmt.broker
    who = runner(broker)
    if who is None or who == broker.settings.node_name:
        return None
    path = "/api/shovels" + (f"/{quote(vhost, safe='')}" if vhost is not None else "")
    items = (await ask_members(mgmt, authorization, path, [who])).get(who)
    if not isinstance(items, list):
        return None
    return [item for item in items if isinstance(item, dict) and item.get("node") == who]
