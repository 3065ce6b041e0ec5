"""Basic class: Qos, Consume, Cancel, Publish (completed content), Get, Ack, Nack, Reject, Recover.

Source: AMQP 0-9-1 class basic with RabbitMQ's semantics: "Consumer Prefetch" (``global=False`` is
per consumer, ``True`` per channel; prefetch_size is not supported, 540), "Consumer Acknowledgements
and Publisher Confirms" (multiple acks, nack, unknown delivery tag is 406), "Publishers" (mandatory
-> Basic.Return 312 NO_ROUTE; unroutable messages are still confirmed), "Sender-selected
Distribution" (BCC removed before delivery), "Consumer Cancel Notification", "Exclusive consumers".
"""

from __future__ import annotations

import base64
import os
import struct
from collections import defaultdict
from typing import TYPE_CHECKING, Any, cast

from pamqp import commands as cmd

from queues.arguments import parse_expiration
from queues.errors import InvalidArgument as QueueInvalidArgument
from queues.errors import NotServed
from queues.message import Message
from queues.stream.queue import parse_offset_spec
from routing.errors import InvalidArgument as RoutingInvalidArgument

from ...protocol import constants as c
from ...protocol.delivery import encode_get_ok, encode_return, encode_routing
from ...protocol.errors import ChannelException, ConnectionException
from ..access import permit
from ..confirms import STORE
from ..consumer import ChannelConsumer
from ..delayed import hold_delayed
from ..relay_inbox import RelayOrigin
from ..stats import (
    ACKED,
    GET_AUTO,
    GET_EMPTY,
    GET_MANUAL,
    REDELIVERED,
    exchange_cell,
    queue_cell,
    typed_slot,
)
from .queue import queue_name

if TYPE_CHECKING:
    from queues.entry import Origin, QueueEntry
    from queues.queue_type import QueueType, ReplicatedGet

    from ...protocol.methods import Publish
    from ..channel import Channel


def qos(ch: Channel, m: cmd.Basic.Qos) -> None:
    """Basic.Qos -> Qos-Ok. prefetch_size != 0 is 540 NOT_IMPLEMENTED (as RabbitMQ)."""
    if m.prefetch_size:
        raise ConnectionException(c.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - prefetch_size!=0 "
                                  f"({m.prefetch_size})", 60, 10)
    if m.global_:
        ch.global_prefetch = m.prefetch_count
    else:
        ch.prefetch = m.prefetch_count
    ch.connection.send_method(ch.id, cmd.Basic.QosOk())
    for consumer in ch.consumers.values():
        ch.connection.broker.needs_dispatch.add(consumer.queue)


def consume(ch: Channel, m: cmd.Basic.Consume) -> None:
    """Basic.Consume -> Consume-Ok, then deliveries. 530 for a reused consumer tag (connection
    exception, as RabbitMQ); 403 when the queue has an exclusive consumer or an exclusive consume
    meets existing consumers; 404/405 from the queue lookup."""
    vhost = ch.vhost
    permit(ch, "read", "queue", queue_name(ch, m.queue))
    q = vhost.get_queue(queue_name(ch, m.queue), ch.connection)
    tag = m.consumer_tag or ("amq.ctag-" + base64.urlsafe_b64encode(os.urandom(16)).decode()
                             .rstrip("="))
    if tag in ch.consumers:
        raise ConnectionException(c.NOT_ALLOWED, f"NOT_ALLOWED - attempt to reuse consumer tag "
                                  f"'{tag}'", 60, 20)
    existing = list(q.consumers())
    if any(getattr(x, "exclusive", False) for x in existing) or (m.exclusive and existing):
        raise ChannelException(c.ACCESS_REFUSED, f"ACCESS_REFUSED - queue '{q.name}' in vhost "
                               f"'{vhost.name}' in exclusive use")
    args = m.arguments or {}
    caps = q.capabilities
    if caps.needs_prefetch or not caps.no_ack_consumers or caps.consume_offset:
        _check_consume(ch, q, m.no_ack, args)
    priority = args.get("x-priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise ChannelException(c.PRECONDITION_FAILED,
                               "PRECONDITION_FAILED - invalid arg 'x-priority': expected integer")
    consumer = ChannelConsumer(ch, q, tag, no_ack=m.no_ack, exclusive=m.exclusive,
                               prefetch=ch.prefetch, priority=priority, arguments=args)
    ch.consumers[tag] = consumer
    if not m.nowait:
        ch.connection.send_method(ch.id, cmd.Basic.ConsumeOk(tag))
    vhost.touch(q.name)
    vhost.add_consumer(consumer)


def _check_consume(ch: Channel, q: Any, no_ack: bool, args: dict) -> None:
    """A queue type's rules for consuming (RabbitMQ's for streams, checked against 3.10): a
    per-consumer prefetch count when it needs one (406 "consumer prefetch count is not set", also
    with only a global one), then manual acks when it serves no no-ack consumers (540
    NOT_IMPLEMENTED, connection), and a valid x-stream-offset where it takes one (406)."""
    caps = q.capabilities
    where = f"queue '{q.name}' in vhost '{ch.vhost.name}'"
    if caps.needs_prefetch and not ch.prefetch:
        raise ChannelException(c.PRECONDITION_FAILED, "PRECONDITION_FAILED - consumer prefetch "
                               f"count is not set for '{where}'")
    if no_ack and not caps.no_ack_consumers:
        raise ConnectionException(c.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - automatic "
                                  f"acknowledgement not supported by {caps.type_name} queues "
                                  f"{where}", 60, 20)
    if caps.consume_offset:
        try:
            parse_offset_spec(args.get("x-stream-offset"))
        except ValueError as exc:
            raise ChannelException(c.PRECONDITION_FAILED, "PRECONDITION_FAILED - invalid arg "
                                   f"'x-stream-offset' for {where}: {exc}") from None


def cancel(ch: Channel, m: cmd.Basic.Cancel) -> None:
    """Basic.Cancel -> Cancel-Ok (also for an unknown tag). Unacked deliveries stay unacked."""
    # pamqp types every argument Optional (its constructors' default); a decoded Cancel has a str
    consumer = ch.consumers.pop(m.consumer_tag, None)  # type: ignore[arg-type]
    if not m.nowait:
        ch.connection.send_method(ch.id, cmd.Basic.CancelOk(m.consumer_tag))
    if consumer is not None:
        consumer.fold_counts()
        ch.vhost.remove_consumer(consumer)


def _strip_bcc(msg: Message) -> Message:
    headers = msg.headers
    if headers and "BCC" in headers:
        props = msg.properties
        new_headers = {k: v for k, v in headers.items() if k != "BCC"}
        props = cmd.Basic.Properties(**{k: getattr(props, k) for k in props.__slots__})
        props.headers = new_headers
        stripped = msg.with_properties(props)
        stripped.routing_raw = msg.routing_raw
        return stripped
    return msg


def publish_message(ch: Channel, publish: Publish, header: bytes, body: bytes) -> None:
    """A complete Basic.Publish: check the exchange (404, 403 internal), the expiration property
    (406 when not a non-negative integer), then route and enqueue (or hold it in tx mode)."""
    permit(ch, "write", "exchange", publish.exchange)
    vhost = ch.vhost
    exchange = vhost.routing.get_exchange(publish.exchange)
    if exchange is None:
        raise vhost.not_found("exchange", publish.exchange)
    if exchange.internal:
        raise ChannelException(c.ACCESS_REFUSED, f"ACCESS_REFUSED - cannot publish to internal "
                               f"exchange '{publish.exchange}' in vhost '{vhost.name}'")
    msg = Message(publish.exchange, publish.routing_key, header, body)
    msg.routing_raw = publish.routing_raw
    try:
        # Headers are decoded here, once: routing needs them (CC/BCC, headers exchanges) and a
        # malformed or absurdly nested table must fail now, as 502, not later inside a queue.
        if msg.has_headers:
            msg.properties  # noqa: B018
        expiration = msg.expiration
        user_id = msg.user_id
    except (ValueError, TypeError, struct.error, RecursionError, UnicodeDecodeError):
        raise ConnectionException(c.SYNTAX_ERROR, "SYNTAX_ERROR - malformed content header",
                                  60, 40) from None
    if expiration is not None:
        try:
            parse_expiration(expiration)
        except QueueInvalidArgument:
            raise ChannelException(c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - invalid "
                                   f"expiration '{expiration}'") from None
    if user_id is not None:
        user = ch.connection.user
        if user is None:  # unreachable: channels open only after authentication
            raise AttributeError("'NoneType' object has no attribute 'name' (no authenticated user)")
        if user_id != user.name:
            raise ChannelException(c.PRECONDITION_FAILED,
                                   f"PRECONDITION_FAILED - user_id property set to '{user_id}' but "
                                   f"authenticated user was '{user.name}'")
    conn = ch.connection
    if not conn.has_published:
        conn.has_published = True
        if conn.blocked:  # opened during an alarm: RabbitMQ says Blocked at the first publish
            conn.broker.announce_blocked(conn)
    ch.n_publish += 1
    if ch.tx is not None:
        ch.tx.append(("publish", (msg, publish.mandatory, exchange)))
        return
    deliver_published(ch, msg, publish.mandatory, exchange)


def deliver_published(ch: Channel, msg: Message, mandatory: bool, exchange: Any) -> None:
    """Route ``msg``, enqueue it, return it when mandatory and unroutable, settle its confirm;
    counted in ``exchange``'s (the ``routing.Exchange`` it was published to) ``publish_in`` and
    ``publish_out`` (``stats.exchange_cell``)."""
    vhost = ch.vhost
    # an x-delayed-message exchange holds a message with an x-delay: routed when due, never
    # returned (the plugin: "the mandatory flag is not supported"); confirmed once written
    # (held: the waits of that confirm, None when not held)
    has_headers = msg.has_headers  # a property: read once
    held = hold_delayed(vhost, msg) if has_headers else None
    try:
        names = set() if held is not None else vhost.route(msg)
    except RoutingInvalidArgument as exc:  # CC/BCC not an array
        raise ChannelException(c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - {exc}") from None
    except (ValueError, TypeError, struct.error):  # undecodable headers
        raise ConnectionException(c.SYNTAX_ERROR, "SYNTAX_ERROR - malformed content header",
                                  60, 40) from None
    ok = True
    sid = None
    waits = None
    try:   # cheaper than .get on the path every publish takes
        cell = vhost.exchange_counts[exchange]
    except KeyError:
        cell = exchange_cell(vhost, exchange)
    cell.publish_in += 1
    if names:
        ch.n_routed += len(names)
        cell.publish_out += len(names)
        if has_headers:
            msg = _strip_bcc(msg)
        ok, sid, waits = vhost.enqueue(msg, names)
    elif mandatory and held is None:
        ch.n_returned += 1
        routing_raw = msg.routing_raw or encode_routing(msg.exchange, msg.routing_key)
        conn = ch.connection
        conn.write(encode_return(ch.id, c.NO_ROUTE, "NO_ROUTE", routing_raw, msg.header_payload,
                                 msg.body, conn.frame_max))
    else:
        ch.n_dropped += 1
        if held:   # in a cluster's replicated log: confirmed once committed there
            waits = held
    confirms = ch.confirms
    if confirms is not None:
        if waits is not None:  # streams, replicated queues: safe once their logs say so
            if sid is not None:
                waits.append((STORE, sid))
                vhost.broker.durability.wait_for_sync(ch)
            confirms.wait(confirms.next_seq(), waits, ok)
            for source, _token in waits:
                if source is not STORE:
                    source.watch(ch)
        elif sid is None:
            confirms.settle(confirms.next_seq(), ok)
        else:  # on disk only after the next group-commit sync
            confirms.defer(confirms.next_seq(), sid, ok)
            vhost.broker.durability.wait_for_sync(ch)


def get(ch: Channel, m: cmd.Basic.Get) -> None:
    """Basic.Get -> Get-Ok + content, or Get-Empty. A replicated queue answers once its log has
    applied the get (``_get_replicated``)."""
    vhost = ch.vhost
    permit(ch, "read", "queue", queue_name(ch, m.queue))
    q = vhost.get_queue(queue_name(ch, m.queue), ch.connection)
    if not q.capabilities.basic_get:  # as RabbitMQ (streams): a connection error
        raise ConnectionException(c.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - basic.get not supported "
                                  f"by {q.capabilities.type_name} queues queue '{q.name}' in "
                                  f"vhost '{vhost.name}'",
                                  60, 70)
    vhost.touch(q.name)
    try:
        if q.capabilities.replicated:
            _get_replicated(ch, m, q)
            return
        entry = q.get(m.no_ack)
    except NotServed as exc:  # a quorum queue on a broker outside its group
        raise ChannelException(c.PRECONDITION_FAILED, f"PRECONDITION_FAILED - {exc}",
                               60, 70) from None
    if entry is None:
        ch.typed[typed_slot(GET_EMPTY, q)] += 1
        queue_cell(vhost, q).get_empty += 1
        ch.connection.send_method(ch.id, cmd.Basic.GetEmpty())
        return
    _send_get_ok(ch, q, entry, m.no_ack, q.message_count)


def _get_replicated(ch: Channel, m: cmd.Basic.Get, q: QueueType) -> None:
    """One Dequeue in the queue's log, answered when applied: the message reaches this client
    only, and one requeued just before is there (RabbitMQ ``rabbit_quorum_queue:dequeue/4``).
    Should the channel be gone by then, a message it took goes back to the queue."""
    def done(entry: QueueEntry | None, remaining: int) -> None:
        if ch.closing or ch.connection.channels.get(ch.id) is not ch:
            if entry is not None and not m.no_ack:
                q.requeue_many([entry])
            return
        if entry is None:
            ch.typed[typed_slot(GET_EMPTY, q)] += 1
            queue_cell(ch.vhost, q).get_empty += 1
            ch.connection.send_method(ch.id, cmd.Basic.GetEmpty())
        else:
            _send_get_ok(ch, q, entry, m.no_ack, remaining)

    cast("ReplicatedGet", q).get_then(m.no_ack, done)


def _send_get_ok(ch: Channel, q: QueueType, entry: QueueEntry, no_ack: bool,
                 message_count: int) -> None:
    conn = ch.connection
    tag = ch.next_delivery_tag
    ch.next_delivery_tag = tag + 1
    msg = entry.message
    if not no_ack:
        ch.unacked[tag] = (q, entry, None)
    ch.typed[typed_slot(GET_AUTO if no_ack else GET_MANUAL, q)] += 1
    counts = queue_cell(ch.vhost, q)
    if no_ack:
        counts.get_no_ack += 1
    else:
        counts.get += 1
    if entry.redelivered:
        ch.typed[typed_slot(REDELIVERED, q)] += 1
        counts.redeliver += 1
    routing_raw = msg.routing_raw or encode_routing(msg.exchange, msg.routing_key)
    conn.write(encode_get_ok(ch.id, tag, entry.redelivered, routing_raw, message_count,
                             msg.header_payload, msg.body, conn.frame_max))


def _tags(ch: Channel, delivery_tag: int, multiple: bool) -> list[int]:
    unacked = ch.unacked
    if multiple:
        if delivery_tag == 0:
            return list(unacked)
        tags = [t for t in unacked if t <= delivery_tag]
        if delivery_tag not in unacked and not tags:
            raise _unknown(delivery_tag)
        return tags
    if delivery_tag not in unacked:
        raise _unknown(delivery_tag)
    return [delivery_tag]


def _unknown(tag: int) -> ChannelException:
    return ChannelException(c.PRECONDITION_FAILED,
                            f"PRECONDITION_FAILED - unknown delivery tag {tag}")


def settle_unacked(ch: Channel, tags: list[int], *, ack: bool = False,
                   requeue: bool = False) -> None:
    """Settle deliveries: ack, requeue (back to their place, redelivered), or reject (dead-letter
    or drop). Frees prefetch credit and marks the queues for dispatch."""
    unacked = ch.unacked
    needs_dispatch = ch.connection.broker.needs_dispatch
    requeues: dict[Any, list] = defaultdict(list) if requeue and not ack else {}
    acks: dict[Any, list] = {}  # queue -> entries acked: one journal record each (multiple acks)
    single = len(tags) == 1
    relayed: list[Origin] = []
    for tag in tags:
        q, entry, consumer = unacked.pop(tag)
        if consumer is not None:
            consumer.unacked -= 1
            needs_dispatch.add(q)
        origin = entry.origin
        if origin is not None:
            # relayed by another member, still its: it leaves our queue whatever the outcome,
            # and the sender settles it (``core.relay_inbox``)
            relayed.append(origin)
        elif not ack:
            if requeue:
                requeues[q].append(entry)
            else:
                q.reject(entry)
            continue
        if ack:  # a consumer's slot is computed once; a Basic.Get's here
            if consumer is not None and not consumer.folded:
                consumer.n_acked += 1
            else:   # the queue's count too (a live consumer's is read from it)
                ch.typed[consumer.acked_slot if consumer is not None else typed_slot(ACKED, q)] += 1
                (consumer.counts if consumer is not None else queue_cell(ch.vhost, q)).ack += 1
        if single:
            q.ack(entry)
        else:
            batch = acks.get(q)
            if batch is None:
                acks[q] = [entry]
            else:
                batch.append(entry)
    for q, entries in acks.items():
        q.ack_many(entries)
    if relayed:
        outcome = "ack" if ack else "requeue" if requeue else "reject"
        for origin in relayed:
            if isinstance(origin, RelayOrigin):  # the core's own (compiled: a direct call)
                origin.settle(outcome)
            else:
                origin.settle(outcome)
    for q, entries in requeues.items():
        q.requeue_many(entries)
        needs_dispatch.add(q)
    if ch.global_prefetch:
        for consumer in ch.consumers.values():
            needs_dispatch.add(consumer.queue)


def ack(ch: Channel, m: cmd.Basic.Ack) -> None:
    """Basic.Ack (multiple; tag 0 with multiple = all). 406 for an unknown delivery tag."""
    tags = _tags(ch, m.delivery_tag, m.multiple)
    ch.n_ack += len(tags)
    if ch.tx is not None:
        ch.tx.append(("ack", (m.delivery_tag, m.multiple)))
        return
    settle_unacked(ch, tags, ack=True)


def nack(ch: Channel, m: cmd.Basic.Nack) -> None:
    """Basic.Nack (RabbitMQ extension): multiple, requeue."""
    tags = _tags(ch, m.delivery_tag, m.multiple)
    _refuse_stream_nack(ch, tags, 120)
    if ch.tx is not None:
        ch.tx.append(("nack", (m.delivery_tag, m.multiple, m.requeue)))
        return
    settle_unacked(ch, tags, requeue=m.requeue)


def reject(ch: Channel, m: cmd.Basic.Reject) -> None:
    """Basic.Reject: one delivery, requeue or dead-letter."""
    # pamqp types every argument Optional (its constructors' default); a decoded Reject has an int
    tags = _tags(ch, m.delivery_tag, False)  # type: ignore[arg-type]
    _refuse_stream_nack(ch, tags, 90)
    if ch.tx is not None:
        ch.tx.append(("nack", (m.delivery_tag, False, m.requeue)))
        return
    settle_unacked(ch, tags, requeue=m.requeue)


def _refuse_stream_nack(ch: Channel, tags: list[int], method_id: int) -> None:
    """RabbitMQ (checked against 3.10) refuses Basic.Nack / Basic.Reject of a delivery from a
    queue type without nacks (streams) with 540 NOT_IMPLEMENTED, a connection error: streams
    only take acks."""
    if not ch.vhost.stream_names:  # no queue of such a type in this vhost: nothing to check
        return
    unacked = ch.unacked
    for tag in tags:
        q = unacked[tag][0]
        if not q.capabilities.nack:
            raise ConnectionException(
                c.NOT_IMPLEMENTED, "NOT_IMPLEMENTED - basic.nack and basic.reject not supported "
                f"by {q.capabilities.type_name} queues queue '{q.name}' in vhost "
                f"'{ch.vhost.name}'", 60, method_id)


def recover(ch: Channel, m: cmd.Basic.Recover) -> None:
    """Basic.Recover: requeue every unacked delivery of the channel -> Recover-Ok. (RabbitMQ
    requeues for requeue=false too.)"""
    settle_unacked(ch, list(ch.unacked), requeue=True)
    ch.connection.send_method(ch.id, cmd.Basic.RecoverOk())


def recover_async(ch: Channel, m: cmd.Basic.RecoverAsync) -> None:
    """Basic.RecoverAsync (deprecated): as Recover without the reply."""
    settle_unacked(ch, list(ch.unacked), requeue=True)


def apply_tx_operation(ch: Channel, op: tuple[str, Any]) -> None:
    """Apply one held tx operation at Tx.Commit (publishes and settlements, in order)."""
    kind, args = op
    if kind == "publish":
        deliver_published(ch, *args)
        return
    tag, multiple, *rest = args
    try:
        tags = _tags(ch, tag, multiple)
    except ChannelException:
        return  # settled meanwhile by an earlier op of the same transaction
    if kind == "ack":
        settle_unacked(ch, tags, ack=True)
    else:
        settle_unacked(ch, tags, requeue=rest[0])


HANDLERS = {cmd.Basic.Qos: qos, cmd.Basic.Consume: consume, cmd.Basic.Cancel: cancel,
            cmd.Basic.Get: get, cmd.Basic.Ack: ack, cmd.Basic.Nack: nack,
            cmd.Basic.Reject: reject, cmd.Basic.Recover: recover,
            cmd.Basic.RecoverAsync: recover_async}
