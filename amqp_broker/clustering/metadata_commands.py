"""A client's AMQP method as a metadata log command (``cluster.metadata.commands``), and a broker's
definitions as the commands that recreate them (a member upgrading from ``definitions.db``).

Owns the translation only: Exchange.Declare / Delete / Bind / Unbind and Queue.Declare / Bind /
Unbind / Delete (pamqp methods, as the core's handlers received them, after their permission
checks and server-named queue names) into commands; ``connection_id`` (the cluster-wide name of
a client connection, which owns its exclusive queues); ``definitions_commands`` (every vhost,
user, permission, policy, exchange, shared queue and binding of a broker, and the runtime
parameters its shovel and federation managers keep in its data directory, in an order that
applies). Must not know: Raft, the links. Sources: AMQP 0-9-1 classes exchange and queue;
RabbitMQ "Exchange to Exchange Bindings".
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pamqp import commands as cmd

from cluster.metadata import commands as m

from ..federation.manager import FILE_NAME as FEDERATION_FILE
from ..shovel.manager import FILE_NAME as SHOVEL_FILE

if TYPE_CHECKING:
    from ..core.broker import Broker

__all__ = ["command_of", "connection_id", "definitions_commands", "stored_parameters"]

log = logging.getLogger(__name__)


def connection_id(origin: str, conn: Any) -> str:
    """``"<origin>/<connection id>"``: the name of client connection ``conn`` of the member
    whose origin (``"<member>#<incarnation>"``) is ``origin``; "" for None."""
    return f"{origin}/{conn.id}" if conn is not None else ""


def command_of(vhost: str, method: Any, connection: str, home: str) -> m.Command | None:
    """The command of ``method`` in ``vhost`` asked on ``connection`` (its ``connection_id``)
    of member ``home``; None for a method that is no metadata change."""
    args = dict(getattr(method, "arguments", None) or {})
    if isinstance(method, cmd.Exchange.Declare):
        return m.DeclareExchange(vhost, method.exchange, method.exchange_type, method.durable,
                                 method.auto_delete, method.internal, args)
    if isinstance(method, cmd.Exchange.Delete):
        return m.DeleteExchange(vhost, method.exchange, method.if_unused)
    if isinstance(method, cmd.Exchange.Bind | cmd.Exchange.Unbind):
        kind = m.Bind if isinstance(method, cmd.Exchange.Bind) else m.Unbind
        return kind(vhost, method.source, method.destination, m.EXCHANGE, method.routing_key,
                    args, connection)
    if isinstance(method, cmd.Queue.Declare):
        return m.DeclareQueue(vhost, method.queue, method.durable, method.exclusive,
                              method.auto_delete, args, connection,
                              home if method.exclusive else "")
    if isinstance(method, cmd.Queue.Bind | cmd.Queue.Unbind):
        kind = m.Bind if isinstance(method, cmd.Queue.Bind) else m.Unbind
        return kind(vhost, method.exchange, method.queue, m.QUEUE, method.routing_key, args,
                    connection)
    if isinstance(method, cmd.Queue.Delete):
        return m.DeleteQueue(vhost, method.queue, connection)
    return None


def stored_parameters(data_dir: str | Path) -> list[m.Command]:
    """``SetParameter`` for each runtime parameter a broker's shovel and federation managers
    keep in ``data_dir`` (``parameters.json``, ``federation.json``: ``{"component", "vhost",
    "name", "value"}`` each). A file that cannot be read is logged and skipped."""
    out: list[m.Command] = []
    for name in (SHOVEL_FILE, FEDERATION_FILE):
        path = Path(data_dir) / name
        if not path.exists():
            continue
        try:
            items = json.loads(path.read_text(encoding="utf-8"))
            out += [m.SetParameter(str(p["component"]), str(p["vhost"]), str(p["name"]),
                                   json.dumps(p["value"])) for p in items]
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.error("runtime parameters in %s not carried into the metadata log: %s", path,
                      exc)
    return out


def definitions_commands(broker: Broker, data_dir: str | Path | None = None) -> list[m.Command]:
    """What recreates ``broker``'s definitions in an empty metadata log: vhosts, users,
    permissions, policies, then per vhost its exchanges (not the predeclared ones), shared
    queues (with the arguments they have, policy marks included) and the bindings between
    them, then the runtime parameters kept in ``data_dir`` (``stored_parameters``; None: none).
    Private queues are not included (their connections are gone)."""
    out: list[m.Command] = []
    for name in sorted(broker.vhosts):
        description, tags = broker.vhost_meta.get(name, ("", ()))
        out.append(m.AddVhost(name, description, tuple(tags)))
    for account in broker.access.users.values():
        out.append(m.PutUser(account.name, account.password_hash, account.hashing_algorithm,
                             tuple(account.tags)))
    for (user, vhost_name), grant in broker.access.permissions.items():
        out.append(m.SetPermission(user, vhost_name, grant.configure, grant.write, grant.read))
    for policy in broker.policies.list():
        out.append(m.SetPolicy(policy.vhost, policy.name, policy.pattern,
                               dict(policy.definition), policy.priority, policy.apply_to))
    for name in sorted(broker.vhosts):
        vhost = broker.vhosts[name]
        routing = vhost.routing
        for ex in routing.exchanges():
            if ex.name and not routing.is_reserved(ex.name):
                out.append(m.DeclareExchange(name, ex.name, ex.type, ex.durable, ex.auto_delete,
                                             ex.internal, dict(ex.arguments)))
        shared = {q.name for q in vhost.queues.values() if q.exclusive_owner is None}
        for q in vhost.queues.values():
            if q.name in shared:
                out.append(m.DeclareQueue(name, q.name, q.durable, False, q.auto_delete,
                                          dict(q.arguments)))
        for b in routing.bindings():
            dest = b.destination
            if dest.kind == "queue" and dest.name not in shared:
                continue
            out.append(m.Bind(name, b.source, dest.name,
                              m.QUEUE if dest.kind == "queue" else m.EXCHANGE, b.binding_key,
                              dict(b.arguments)))
    return out + (stored_parameters(data_dir) if data_dir is not None else [])
