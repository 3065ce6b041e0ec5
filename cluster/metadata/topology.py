"""The rules of exchanges, queues and bindings in the metadata state machine: each function applies
one command to a vhost's state and returns its outcome, or raises the ``AMQPException`` a single
broker answers with (``machine`` turns it into ``Refused``), having changed nothing.

Owns the order of the checks, which is ``amqp_broker.core`` 's (``VirtualHost`` and the exchange
and queue handlers): the rules themselves are the shared pure functions of
``amqp_broker.core.declare_rules`` and ``amqp_broker.core.policies``, the cascades and binding
validation are ``routing.RoutingTable`` 's, a quorum queue's arguments and replica choice are
``cluster.quorum.config`` 's. Deterministic: the same state and command give the same outcome and
state on every member (sorted names wherever a set is reported).
Must not know: Raft, bytes, connections' objects (a connection is its id string).
Sources: AMQP 0-9-1 classes exchange and queue; RabbitMQ "Exchanges", "Queues", "Quorum Queues",
"Exclusive Queues", "Exchange to Exchange Bindings".
"""

from __future__ import annotations

from amqp_broker.core import declare_rules as rules
from amqp_broker.core.policies import apply_policy, declared_arguments
from amqp_broker.protocol import constants as c
from amqp_broker.protocol.errors import ChannelException, ConnectionException
from cluster.quorum import config as qconfig
from routing.destination import EXCHANGE, QUEUE, Destination
from routing.errors import InvalidArgument as RoutingInvalidArgument
from routing.errors import UnknownExchangeType
from routing.exchange_types import EXCHANGE_TYPES

from . import commands as m
from .outcomes import Bound, Declared, Deleted
from .state import MetadataState, QueueRecord, VhostState

__all__ = ["declare_exchange", "delete_exchange", "declare_queue", "delete_queue", "bind",
           "unbind", "member_gone", "SERVED_QUEUE_TYPES"]

#: The queue types a clustered broker serves.
SERVED_QUEUE_TYPES = ("classic", "stream", "quorum")


def _invalid(exc: Exception) -> ChannelException:
    """406 for arguments the routing table refuses (its ``InvalidArgument``; a ``TypeError`` for
    a binding argument value it cannot compare, a bytearray: pamqp never decodes one)."""
    return ChannelException(c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - {exc}")


def declare_exchange(vh: VhostState, cmd: m.DeclareExchange) -> Declared:
    """Exchange.Declare: 403 for "" and a new "amq.*" name, 503 (connection) for an unknown type
    (checked before existence, as ``rabbit_channel``), 406 inequivalent or a bad
    alternate-exchange argument."""
    if not cmd.name:
        raise rules.default_exchange_refused()
    if cmd.type not in EXCHANGE_TYPES:
        raise rules.unknown_exchange_type(cmd.type)
    existing = vh.routing.get_exchange(cmd.name)
    if existing is not None:
        rules.check_exchange_equivalent(vh.name, cmd.name, existing, cmd.type, cmd.durable,
                                        cmd.auto_delete, cmd.internal, cmd.arguments)
        return Declared(cmd.name, False)
    rules.check_new_exchange_name(cmd.name)
    try:
        vh.routing.declare_exchange(cmd.name, cmd.type, durable=cmd.durable,
                                    auto_delete=cmd.auto_delete, internal=cmd.internal,
                                    arguments=dict(cmd.arguments))
    except RoutingInvalidArgument as exc:
        raise _invalid(exc) from None
    except UnknownExchangeType as exc:  # x-delayed-message naming no type in x-delayed-type
        raise rules.unknown_exchange_type(exc.args[-1] if len(exc.args) > 1 else cmd.type
                                          ) from None
    return Declared(cmd.name, True)


def delete_exchange(vh: VhostState, cmd: m.DeleteExchange) -> Deleted:
    """Exchange.Delete: 403 for "" and "amq.*"; a missing exchange is an Ok (RabbitMQ); 406
    ``if_unused`` while it is the source of bindings."""
    rules.check_exchange_deletable(vh.name, cmd.name)
    x = vh.routing.get_exchange(cmd.name)
    if x is None:
        return Deleted(False)
    if cmd.if_unused and len(x.matcher):
        raise rules.exchange_in_use(vh.name, cmd.name)
    return Deleted(True, tuple(sorted(vh.routing.delete_exchange(cmd.name))))


def _owned(vh: VhostState, record: QueueRecord, connection: str) -> QueueRecord:
    """405 when ``record`` is another connection's private queue."""
    if record.owner and record.owner != connection:
        raise rules.locked(vh.name, record.name)
    return record


def declare_queue(state: MetadataState, vh: VhostState, cmd: m.DeclareQueue,
                  index: int) -> Declared:
    """Queue.Declare, as ``VirtualHost.declare_queue``: an existing queue must be declared
    equivalently (405 another connection's or a differing exclusive flag, 406 durable,
    auto_delete or an argument); a new one: 403 "amq.*", the matching policy's arguments, 406
    invalid arguments or properties of its type. A quorum queue gets its replica members (the
    policy's ``ha-mode nodes``, else ``x-quorum-initial-group-size`` members of the
    configuration chosen by ``cluster.quorum.config.choose_members``) and a group id made from
    the log ``index`` of this declaration, unique to it."""
    existing = vh.queues.get(cmd.name)
    if existing is not None:
        _owned(vh, existing, cmd.connection)
        rules.check_queue_redeclare(
            vh.name, cmd.name, durable=cmd.durable, exclusive=cmd.exclusive,
            auto_delete=cmd.auto_delete, arguments=declared_arguments(cmd.arguments),
            have_durable=existing.durable, have_exclusive=existing.exclusive,
            have_auto_delete=existing.auto_delete,
            have_arguments=declared_arguments(existing.arguments))
        return Declared(cmd.name, False)
    rules.check_new_queue_name(cmd.name)
    arguments = apply_policy(state.policies, vh.name, cmd.name, cmd.arguments,
                             durable=cmd.durable, exclusive=cmd.exclusive,
                             auto_delete=cmd.auto_delete, view=state.members or None) or {}
    settings = rules.parse_queue_arguments(vh.name, cmd.name, arguments)
    queue_type = settings.queue_type
    if queue_type not in SERVED_QUEUE_TYPES:
        raise rules.not_served(vh.name, cmd.name, queue_type)
    if queue_type == "stream":
        rules.check_stream_declare(vh.name, cmd.name, cmd.durable, cmd.exclusive,
                                   cmd.auto_delete, arguments)
        # a replicated stream's members, as a quorum queue's (issue 25; a lone broker's stream
        # stays local: amqp_broker.clustering.stream)
        arguments = _with_group(state, vh, cmd, arguments, index, stream=True)
    elif queue_type == "quorum":
        rules.check_permanent_shared(vh.name, cmd.name, cmd.durable, cmd.exclusive,
                                     cmd.auto_delete)
        rules.check_type_arguments(vh.name, cmd.name, "quorum", qconfig.check_arguments,
                                   arguments)
        arguments = _with_group(state, vh, cmd, arguments, index)
    vh.add_queue(QueueRecord(cmd.name, cmd.durable, cmd.auto_delete,
                             cmd.connection if cmd.exclusive else "",
                             cmd.home if cmd.exclusive else "", dict(arguments), queue_type))
    return Declared(cmd.name, True)


def _with_group(state: MetadataState, vh: VhostState, cmd: m.DeclareQueue,
                arguments: dict, index: int, stream: bool = False) -> dict:
    """``arguments`` plus a quorum queue's members and group id (``cluster.quorum.config``'s
    hidden arguments, which every member's replica factory reads); for a ``stream``,
    ``x-initial-cluster-size`` of them (default all, as RabbitMQ's streams)."""
    args = dict(arguments)
    named = args.get(qconfig.MEMBERS_ARG)
    if isinstance(named, str) and named:
        members = tuple(sorted(set(named.split(","))))
    else:
        view = state.members or ((cmd.home,) if cmd.home else ())
        if not view and stream:
            return args   # no members known: a local stream
        if not view:
            raise rules.not_served(vh.name, cmd.name, "quorum")
        size = (args.get("x-initial-cluster-size") or len(view) if stream else
                args.get("x-quorum-initial-group-size") or qconfig.DEFAULT_GROUP_SIZE)
        members = qconfig.choose_members(view, int(size), vh.name, cmd.name)
    if not (isinstance(named, str) and named and qconfig.GROUP_ARG in args):
        args[qconfig.GROUP_ARG] = qconfig.group_id(vh.name, cmd.name, members, index)
    args[qconfig.MEMBERS_ARG] = ",".join(members)
    return args


def delete_queue(vh: VhostState, cmd: m.DeleteQueue) -> Deleted:
    """Queue.Delete: a missing queue is an Ok (Delete-Ok 0, RabbitMQ); 405 another connection's
    private queue. Its bindings go, and the auto-delete exchanges that lose their last one."""
    record = vh.queues.get(cmd.name)
    if record is None:
        return Deleted(False)
    _owned(vh, record, cmd.connection)
    return Deleted(True, vh.remove_queue(cmd.name))


def _destination(cmd: m.Bind | m.Unbind) -> Destination:
    if cmd.destination_kind not in (QUEUE, EXCHANGE):
        raise ConnectionException(c.COMMAND_INVALID, f"COMMAND_INVALID - unknown binding "
                                  f"destination kind '{cmd.destination_kind}'")
    return Destination(QUEUE if cmd.destination_kind == QUEUE else EXCHANGE, cmd.destination)


def bind(vh: VhostState, cmd: m.Bind) -> Bound:
    """Queue.Bind / Exchange.Bind in the handlers' order: the queue (404, 405), then 403 for the
    default exchange, 404 a missing source or destination exchange, 406 arguments the
    exchange type refuses (headers ``x-match``)."""
    dest = _destination(cmd)
    if dest.kind == m.QUEUE:
        record = vh.queues.get(cmd.destination)
        if record is None:
            raise rules.not_found(vh.name, "queue", cmd.destination)
        _owned(vh, record, cmd.connection)
    if not cmd.source or (dest.kind == m.EXCHANGE and not dest.name):
        raise rules.default_exchange_refused()
    if vh.routing.get_exchange(cmd.source) is None:
        raise rules.not_found(vh.name, "exchange", cmd.source)
    if dest.kind == m.EXCHANGE and vh.routing.get_exchange(dest.name) is None:
        raise rules.not_found(vh.name, "exchange", dest.name)
    try:
        return Bound(vh.routing.bind(cmd.source, dest, cmd.routing_key, dict(cmd.arguments)))
    except (RoutingInvalidArgument, TypeError) as exc:
        raise _invalid(exc) from None


def unbind(vh: VhostState, cmd: m.Unbind) -> Bound:
    """Queue.Unbind / Exchange.Unbind: idempotent as in RabbitMQ (a missing source, destination
    or binding is an Ok); 405 another connection's private queue, 403 the default exchange."""
    dest = _destination(cmd)
    record = vh.queues.get(cmd.destination) if dest.kind == m.QUEUE else None
    if record is not None:
        _owned(vh, record, cmd.connection)
    if not cmd.source or (dest.kind == m.EXCHANGE and not dest.name):
        raise rules.default_exchange_refused()
    routing = vh.routing
    if routing.get_exchange(cmd.source) is None or (
            dest.kind == m.EXCHANGE and routing.get_exchange(dest.name) is None):
        return Bound(False)
    try:
        result = routing.unbind(cmd.source, dest, cmd.routing_key, dict(cmd.arguments))
    except (RoutingInvalidArgument, TypeError) as exc:
        raise _invalid(exc) from None
    return Bound(bool(result), tuple(sorted(result.auto_deleted)))


def member_gone(state: MetadataState, cmd: m.MemberGone) -> Deleted:
    """Delete every private queue living on ``cmd.member`` (every vhost); ``existed`` when there
    was one, ``cascade`` the auto-delete exchanges that went with their bindings."""
    cascade: set[str] = set()
    existed = False
    for vh in (state.vhosts[name] for name in sorted(state.vhosts)):
        for name in sorted(n for n, q in vh.queues.items() if q.owner and q.home == cmd.member):
            existed = True
            cascade.update(vh.remove_queue(name))
    return Deleted(existed, tuple(sorted(cascade)))
