"""The broker follows the metadata log: its objects are made to match the records of the applied
state (``cluster.metadata.state``), the only path that changes definitions in a cluster.

Owns ``reconcile_vhost`` (exchanges, queues -- classic shared, stream and quorum queue objects,
this member's private queues, proxies of the other members' -- and bindings of one vhost made
equal to the records: missing ones created, differing ones changed or re-created, extra ones
deleted with their stored messages), ``reconcile_access`` (vhosts, users, permissions, policies)
and ``reconcile`` (all of it: after a member caught up with the log, or installed a snapshot,
so it forgets what was deleted while it was away). The broker's own operations
(``VirtualHost``, ``core.access_store``, ``core.policy_store``) do the
changes, so the definitions store (definitions.db) stays their cache, and Basic.Cancel reaches
the consumers of a deleted queue. Must not know: Raft, links.

A private queue's record names its connection (``"<member>#<incarnation>/<id>"``): on its home
member it is the queue of that connection; when that connection is gone (closed before the
declaration committed, or an older incarnation of this member) the queue is not made and
``orphans`` lists it, for the caller to propose its deletion.
Sources: RabbitMQ "Metadata store" (every node's definitions follow the Khepri store),
"Exclusive Queues"; DESIGN.md §4.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from amqp_broker.core import access_store, policy_store, proxies
from amqp_broker.core import declare_rules as rules
from amqp_broker.core.access import Account
from amqp_broker.core.policies import Policy
from amqp_broker.protocol.errors import AMQPException
from cluster.metadata import commands as m
from cluster.metadata.commands import QUEUE as QUEUE_KIND
from cluster.quorum.config import GROUP_ARG
from queues.arguments import parse_arguments
from queues.errors import InvalidArgument
from queues.queue import Queue
from routing.destination import Destination
from routing.errors import RoutingError

if TYPE_CHECKING:
    from amqp_broker.core.broker import Broker
    from amqp_broker.core.vhost import VirtualHost
    from cluster.metadata.state import MetadataState, QueueRecord, VhostState

__all__ = ["reconcile", "reconcile_vhost", "follow_names", "follow_binding", "follow_committed",
           "reconcile_access", "Orphan"]

log = logging.getLogger(__name__)

#: (vhost, queue name, owner connection id) of a private queue whose connection is gone.
Orphan = tuple[str, str, str]


def _binding_key(b: Any) -> tuple[str, str, str, str, str]:
    args = b.arguments
    return (b.source, b.destination.kind, b.destination.name, b.binding_key,
            json.dumps(dict(args), sort_keys=True, default=repr) if args else "{}")


def _owner(broker: Broker, origin: str, owner: str) -> Any:
    """The connection of this member that ``owner`` names, or None (gone)."""
    prefix, _, conn_id = owner.rpartition("/")
    if prefix != origin or not conn_id.isdigit():
        return None
    conn = broker.connections.get(int(conn_id))
    return conn if conn is not None and not conn.closed else None


def _vhost(broker: Broker, st: VhostState) -> VirtualHost:
    vh = broker.vhosts.get(st.name)
    if vh is None:
        access_store.add_vhost(broker, st.name, st.description, st.tags)
        vh = broker.vhosts[st.name]
    return vh


def reconcile_vhost(broker: Broker, st: VhostState, me: str, origin: str,
                    cancels: list[tuple[Any, str]] | None = None) -> list[Orphan]:
    """Make vhost ``st.name`` of ``broker`` (created when missing) match ``st``; ``me`` is this
    member's name, ``origin`` its current origin. Deleted queues' consumers are appended to
    ``cancels`` (channel, tag) when given, else told at once. Returns the orphaned private
    queues (see the module docstring)."""
    vh = _vhost(broker, st)
    names = {ex.name for ex in st.routing.exchanges()} | {ex.name for ex in vh.routing.exchanges()}
    queues = set(st.queues) | set(vh.queues) | set(vh.proxies)
    return follow_names(broker, st, me, origin, queues, names, cancels, every_binding=True)


def follow_names(broker: Broker, st: VhostState, me: str, origin: str, queues: set[str],
                 exchanges: set[str], cancels: list[tuple[Any, str]] | None = None, *,
                 every_binding: bool = False,
                 pair: tuple[str, Destination] | None = None) -> list[Orphan]:
    """``reconcile_vhost`` for the named ``queues`` and ``exchanges`` only, and the bindings
    from or to them (``every_binding``: all of the vhost's), and the bindings from exchange
    ``pair[0]`` to ``pair[1]`` (a queue.bind or unbind: found through the destination, so a
    bind costs O(the destination's bindings), not O(the source exchange's), which thousands
    of queues bound to one exchange make large): what one command changed, in O(those)
    rather than O(vhost). Returns the orphaned private queues."""
    vh = _vhost(broker, st)
    routing, want = vh.routing, st.routing
    for name in sorted(exchanges):   # create, or re-create those that differ
        ex = want.get_exchange(name)
        if ex is None or not name or want.is_reserved(name):
            continue
        have = routing.get_exchange(name)
        if have is not None and (have.type, have.durable, have.auto_delete, have.internal,
                                 dict(have.arguments)) == (ex.type, ex.durable, ex.auto_delete,
                                                           ex.internal, dict(ex.arguments)):
            continue
        if have is not None:
            vh.delete_exchange(name)
        try:
            made = routing.declare_exchange(name, ex.type, durable=ex.durable,
                                            auto_delete=ex.auto_delete, internal=ex.internal,
                                            arguments=dict(ex.arguments))
            broker.durability.exchange_declared(vh.name, made)
        except RoutingError as exc:
            log.error("exchange %r of vhost %r: %s", name, vh.name, exc)
    orphans = [o for name in sorted(queues)
               if (o := _follow_queue(broker, vh, st, name, me, origin, cancels)) is not None]
    if every_binding:
        wanted = {_binding_key(b): b for b in want.bindings()}
        have_keys = {_binding_key(b): b for b in routing.bindings()}
    else:
        wanted = _touching(want, queues, exchanges, pair)
        have_keys = _touching(routing, queues, exchanges, pair)
    for key, b in have_keys.items():
        if key not in wanted:
            _bind(vh, b, unbind=True)
    for key, b in wanted.items():
        if key not in have_keys:
            _bind(vh, b, unbind=False)
    for name in sorted(exchanges):
        if name and not routing.is_reserved(name) and routing.get_exchange(name) is not None \
                and want.get_exchange(name) is None:
            vh.delete_exchange(name)
    return orphans


def follow_committed(broker: Broker, state: MetadataState, me: str, origin: str, command: Any,
                     outcome: Any, cancels: list[tuple[Any, str]] | None,
                     parameters: Callable[[], None]) -> list[Orphan]:
    """The broker follows what one committed ``command`` (``cluster.metadata.commands``, with
    the machine's ``outcome``) changed: the queues, exchanges and bindings it named (and the
    auto-delete exchanges that went with it, ``outcome.cascade``), access and policies, or
    everything (a vhost deleted, a member gone); ``parameters()`` is called when runtime
    parameters changed. Returns the orphaned private queues."""
    if isinstance(command, m.InstallView):   # the membership's (``on_view``), no definitions
        return []
    if isinstance(command, m.SetParameter | m.ClearParameter | m.DeleteVhost):
        parameters()
        if not isinstance(command, m.DeleteVhost):
            return []
    if isinstance(command, m.MemberGone | m.DeleteVhost | m.AddVhost | m.PutUser
                  | m.DeleteUser | m.SetPermission | m.ClearPermission):
        return reconcile(broker, state, me, origin)
    if isinstance(command, m.SetPolicy | m.ClearPolicy):
        reconcile_access(broker, state)
        st = state.vhosts.get(command.vhost)
        return reconcile_vhost(broker, st, me, origin) if st else []
    st = state.vhosts.get(command.vhost)
    if st is None:
        return []
    queues: set[str] = set()
    exchanges = set(getattr(outcome, "cascade", ()))
    if isinstance(command, m.DeclareQueue | m.DeleteQueue):
        queues.add(command.name)
    elif isinstance(command, m.DeclareExchange | m.DeleteExchange):
        exchanges.add(command.name)
    else:   # a binding: the pair it names (and the auto-delete exchanges it took along)
        return follow_binding(broker, st, me, origin, command, exchanges, cancels)
    return follow_names(broker, st, me, origin, queues, exchanges, cancels)


def follow_binding(broker: Broker, st: VhostState, me: str, origin: str, command: Any,
                   exchanges: set[str], cancels: list[tuple[Any, str]] | None = None
                   ) -> list[Orphan]:
    """``follow_names`` for a binding command (``cluster.metadata.commands`` Bind / Unbind:
    ``source``, ``destination_kind``, ``destination``): its destination queue, the
    auto-delete ``exchanges`` it took along, and the bindings from its source to its
    destination. Returns the orphaned private queues."""
    queue = command.destination_kind == QUEUE_KIND
    pair = (command.source, Destination(command.destination_kind, command.destination))
    return follow_names(broker, st, me, origin, {command.destination} if queue else set(),
                        exchanges, cancels, pair=pair)


def _touching(table: Any, queues: set[str], exchanges: set[str],
              pair: tuple[str, Destination] | None = None) -> dict[tuple, Any]:
    """The bindings of routing ``table`` from one of ``exchanges``, to one of ``queues`` or
    ``exchanges``, or from ``pair[0]`` to ``pair[1]``, by ``_binding_key``."""
    out: dict[tuple, Any] = {}
    if pair is not None:
        source, destination = pair
        for b in table.bindings_to(destination):
            if b.source == source:
                out[_binding_key(b)] = b
    for name in exchanges:
        for b in table.bindings_from(name):
            out[_binding_key(b)] = b
        for b in table.bindings_to(Destination("exchange", name)):
            out[_binding_key(b)] = b
    for name in queues:
        for b in table.bindings_to(Destination("queue", name)):
            out[_binding_key(b)] = b
    return out


def _bind(vh: VirtualHost, b: Any, unbind: bool) -> None:
    dest = Destination(b.destination.kind, b.destination.name)
    if dest.kind == "queue" and dest.name not in vh.queues and dest.name not in vh.proxies:
        return
    try:
        vh.bind(b.source, dest, b.binding_key, dict(b.arguments), unbind=unbind)
    except (AMQPException, RoutingError) as exc:
        log.error("binding %s -> %s of vhost %r: %s", b.source, dest.name, vh.name, exc)


def _same_queue(q: Any, rec: QueueRecord) -> bool:
    """Whether queue object ``q`` is the one ``rec`` records (else it is deleted and made
    again): same type, durability and auto-delete, and for a replicated queue the same Raft
    group. Other arguments are not compared here (``_follow_queue`` re-applies them to a classic
    queue; a stream or replicated queue keeps its own), so that an encoding difference of a
    stored argument can never make a member drop a queue's data."""
    if (q.capabilities.type_name, q.durable, q.auto_delete) != (rec.queue_type, rec.durable,
                                                                rec.auto_delete):
        return False
    return not rec.group or str((q.arguments or {}).get(GROUP_ARG) or "") == rec.group


def _follow_queue(broker: Broker, vh: VirtualHost, st: VhostState, name: str, me: str,
                  origin: str, cancels: list[tuple[Any, str]] | None) -> Orphan | None:
    """Queue ``name`` of ``vh`` made to match its record (a queue object here, a proxy of
    another member's private queue, or nothing); an orphaned private queue is returned."""
    rec = st.queues.get(name)
    q = vh.queues.get(name)
    private_elsewhere = rec is not None and rec.owner and rec.home != me
    owner = _owner(broker, origin, rec.owner) if rec is not None and rec.owner and \
        not private_elsewhere else None
    if q is not None:
        if rec is None or private_elsewhere or (rec.owner and q.exclusive_owner is not owner) \
                or not _same_queue(q, rec):
            vh.delete_queue(q, cancels=cancels)
        elif isinstance(q, Queue) and not rec.owner and dict(q.arguments or {}) != rec.arguments:
            _reconfigure(broker, vh, q, rec)   # a policy changed its arguments
    if rec is None or not private_elsewhere:
        proxies.remove_proxy(vh, name)
    if rec is None:
        return None
    if private_elsewhere:
        if vh.proxies.get(name) != rec.home:
            proxies.remove_proxy(vh, name)
            proxies.add_proxy(vh, name, rec.home)
        return None
    if name in vh.queues:
        return None
    if rec.owner and owner is None:
        return (vh.name, name, rec.owner)
    _create(broker, vh, rec, owner)
    return None


def _reconfigure(broker: Broker, vh: VirtualHost, q: Queue, rec: QueueRecord) -> None:
    """A classic queue whose arguments changed (a policy): takes them as ``policy_store``
    re-applies a policy."""
    try:
        settings = parse_arguments(rec.arguments)
    except InvalidArgument as exc:
        log.warning("queue %r of vhost %r keeps its arguments: %s", q.name, vh.name, exc)
        return
    q.arguments = dict(rec.arguments)
    q.reconfigure(settings)
    broker.durability.queue_declared(vh.name, q)


def _create(broker: Broker, vh: VirtualHost, rec: QueueRecord, owner: Any) -> None:
    try:
        settings = rules.parse_queue_arguments(vh.name, rec.name, rec.arguments)
        q = vh.create_queue(rec.name, settings, durable=rec.durable,
                            auto_delete=rec.auto_delete, exclusive_owner=owner,
                            arguments=dict(rec.arguments))
    except (AMQPException, InvalidArgument, OSError, ValueError) as exc:
        log.error("cannot make queue %r of vhost %r: %s", rec.name, vh.name, exc)
        return
    if owner is not None:
        owner.exclusive_queues.add(q)
    broker.durability.queue_declared(vh.name, q)
    vh.touch(rec.name)


def reconcile_access(broker: Broker, state: MetadataState) -> None:
    """Vhosts (their entities come with ``reconcile_vhost``), users, permissions and policies of
    ``broker`` made equal to ``state`` (a deleted vhost goes with its connections, queues and
    stored messages, ``access_store.delete_vhost``)."""
    for name in [n for n in broker.vhosts if n not in state.vhosts]:
        access_store.delete_vhost(broker, name)
    for name, st in state.vhosts.items():
        if broker.vhosts.get(name) is None or broker.vhost_meta.get(name) != (st.description,
                                                                              st.tags):
            access_store.add_vhost(broker, name, st.description, st.tags)
    users = broker.access.users
    for name in [n for n in users if n not in state.users]:
        access_store.delete_user(broker, name)
    for name, acc in state.users.items():
        old = users.get(name)
        if old is None or (old.password_hash, old.hashing_algorithm, tuple(old.tags)) != \
                (acc.password_hash, acc.hashing_algorithm, tuple(acc.tags)):
            access_store.save_user(broker, Account(name, acc.password_hash,
                                                   acc.hashing_algorithm, tuple(acc.tags),
                                                   old.loopback_only if old else False))
    perms = broker.access.permissions
    for user, vhost in [k for k in perms if k not in state.permissions]:
        access_store.delete_permission(broker, user, vhost)
    for (user, vhost), grant in state.permissions.items():
        if perms.get((user, vhost)) != grant:
            try:
                access_store.save_permission(broker, user, vhost, grant)
            except KeyError:
                pass
    want = {(p.vhost, p.name): p for p in state.policies.list()}
    for p in broker.policies.list():
        if (p.vhost, p.name) not in want:
            policy_store.clear_policy(broker, p.vhost, p.name)
    for key, p in want.items():
        have = broker.policies.get(*key)
        if have is None or have.to_json() != p.to_json():
            try:
                policy_store.set_policy(broker, Policy(p.vhost, p.name, p.pattern,
                                                       dict(p.definition), p.priority,
                                                       p.apply_to))
            except KeyError:
                pass


def reconcile(broker: Broker, state: MetadataState, me: str, origin: str) -> list[Orphan]:
    """Everything of ``broker`` made equal to ``state``; returns the orphaned private queues."""
    reconcile_access(broker, state)
    orphans: list[Orphan] = []
    for name in sorted(state.vhosts):
        orphans += reconcile_vhost(broker, state.vhosts[name], me, origin)
    return orphans


def resave_definitions(broker: Broker) -> int:
    """Write every vhost, user, permission and policy and every durable exchange, queue and
    binding of ``broker`` into its definitions store again (upserts, in the caller's
    transaction): after a follow whose
    definitions.db commit failed (a full disk) the objects followed the log but their rows were
    rolled back, and a later follow finds nothing to change; a restart would then recover from
    the stale file and release the messages of a durable queue it does not find. Rows of objects
    deleted meanwhile may stay: a restarted member deletes them when it follows the log again.
    Returns the number of rows written (0 without a store). Raises ``sqlite3.Error`` / the
    store's errors."""
    durability = broker.durability
    store = durability.definitions
    if store is None:
        return 0
    rows = 0
    for name in broker.vhosts:
        description, tags = broker.vhost_meta.get(name, ("", ()))
        store.save_vhost(name, description, tags)
        rows += 1
    for acc in broker.access.users.values():
        store.save_user(acc.name, acc.password_hash, acc.hashing_algorithm, acc.tags)
        rows += 1
    for (user, vhost), grant in broker.access.permissions.items():
        if user in broker.access.users and vhost in broker.vhosts:
            store.save_permission(user, vhost, grant.configure, grant.write, grant.read)
            rows += 1
    for policy in broker.policies.list():
        if policy.vhost in broker.vhosts:
            store.save_policy(policy.vhost, policy.name, policy.encode())
            rows += 1
    for name, vh in broker.vhosts.items():
        routing = vh.routing
        for ex in routing.exchanges():
            if ex.name and not routing.is_reserved(ex.name) and ex.durable:
                durability.exchange_declared(name, ex)
                rows += 1
        for q in vh.queues.values():
            durability.queue_declared(name, q)
            rows += 1
        for b in routing.bindings():
            source = routing.get_exchange(b.source)
            dest = b.destination
            if source is None or not b.source:
                continue
            if dest.kind == "queue":
                target_q = vh.queues.get(dest.name)
                dest_durable = (target_q is not None and target_q.durable
                                and target_q.exclusive_owner is None)
            else:
                target = routing.get_exchange(dest.name)
                dest_durable = target is not None and target.durable
            durability.binding_changed(name, source, Destination(dest.kind, dest.name),
                                       dest_durable, b.binding_key, dict(b.arguments), True)
            rows += 1
    return rows
