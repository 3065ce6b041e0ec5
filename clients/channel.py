"""The async ``Channel``: every exchange/queue/basic/confirm/tx method, consumers as async
iterators, publisher confirms tracked per delivery tag.

Owns one channel's state: the single outstanding synchronous request (AMQP replies arrive in order
per channel, §2.2.2; a lock keeps one in flight), confirm bookkeeping (a dict of ``Confirmation``
keyed by delivery tag; Basic.Ack/Nack with ``multiple`` settle every tag up to it), mandatory
returns matched to their confirm (the broker sends Basic.Return before the Ack of that message),
its consumers, and what must be replayed after a reconnect (qos, confirm mode, tx mode,
consumers). The connection (``clients.aio.Connection``) does the I/O and calls the ``_on_*`` hooks.
Errors: ``ChannelClosed`` (broker's Channel.Close: 403/404/405/406...), ``ConnectionClosed``,
``ConfirmsLost`` (publishes unanswered when the connection dropped), ``TimeoutError``
(``operation_timeout`` seconds elapsed), ``PublishNacked``, ``MessageReturned``.

Connection loss and publishes (also with ``reconnect=True``): what was written on a connection
that dropped is never re-sent by the client and never reported as confirmed. Every pending
``Confirmation`` fails with the connection error, ``wait_for_confirms`` / ``wait_confirmations``
raise ``ConfirmsLost`` (how many were lost), and ``tx_commit`` raises ``ConnectionClosed`` when
the transaction's publishes/acks died with the connection. This is aio-pika's behaviour (pending
confirmation futures fail on connection loss); re-publish with the same ``message_id`` to retry.
"""

from __future__ import annotations

import itertools
import logging
import struct
from typing import TYPE_CHECKING, Any

import anyio
from pamqp import commands as cmd

from .confirms import Confirmation, ConfirmTracker
from .consumer import Consumer
from .errors import ChannelClosed, ConnectionClosed
from .message import Message
from .publishing import Publishing

if TYPE_CHECKING:
    from .aio import Connection

__all__ = ["Channel", "Consumer", "Confirmation"]  # the latter two re-exported

log = logging.getLogger(__name__)
_HEAD = struct.Struct(">BHI")
_TAG_BITS = struct.Struct(">QB")
_ACK_PREFIX = b"\x00\x3c\x00\x50"
_tags = itertools.count(1)


class _Waiter:
    __slots__ = ("expect", "event", "result", "error")

    def __init__(self, expect: tuple[type, ...]) -> None:
        self.expect = expect
        self.event = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class Channel(Publishing):
    """One AMQP channel of a ``clients.aio.Connection`` (get one with ``await conn.channel()``).

    Method names follow pika (``queue_declare``, ``basic_publish`` ...). Every synchronous method
    waits for its reply at most ``conn.operation_timeout`` seconds (``TimeoutError``), waits for a
    reconnect first when the connection is down, and raises ``ChannelClosed`` with the broker's
    reply code when the broker closes the channel over it (the channel is then unusable: open
    another). Declarations, bindings and consumers are recorded and replayed after a reconnect.
    Publishing, confirms and transactions: ``clients.publishing.Publishing``.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.number = 0
        self.epoch = 0
        self._lock = anyio.Lock()
        self._waiter: _Waiter | None = None
        self._closed: BaseException | None = None
        self.confirm_mode = False
        self.tx_mode = False
        self._qos: tuple[int, int, bool] | None = None
        self._confirms = ConfirmTracker()
        self.consumers: dict[str, Consumer] = {}
        self._routing: dict[tuple[str, str, bool], bytes] = {}
        self._tx_ops = 0  # publishes/acks sent in tx mode since the last commit/rollback
        self._tx_lost = 0  # of those, how many died with a connection (reported at commit)

    # ------------------------------------------------------------------------- plumbing
    @property
    def is_open(self) -> bool:
        """True until the channel is closed by us or the broker (reconnects keep it open)."""
        return self._closed is None

    async def _open(self, fresh: bool = False) -> None:
        """Channel.Open on the current connection (used at creation and by recovery).
        ``fresh`` (``Connection.channel()``): a connection lost before the Open is written
        fails it at once with ``ConnectionClosed``; recovery opens on a connection not ready
        yet. A loss after it is written fails it too (``Connection._fail_opening``)."""
        conn = self._conn

        def send_open() -> None:  # called with the waiter installed: OpenOk can't slip past
            if fresh and not conn.ready:
                raise conn._lost_reason or ConnectionClosed(0, "connection lost before "
                                                               "Channel.Open")
            self.number = conn._proto.open_channel()
            self.epoch = conn.epoch
            conn._channels[self.number] = self
            conn._kick()

        await self._rpc(send_open, (cmd.Channel.OpenOk,), recovering=True)

    async def _rpc(self, method: Any, expect: tuple[type, ...], recovering: bool = False) -> Any:
        conn = self._conn
        if not recovering:
            await self._ready()
        async with self._lock:
            if not recovering and (conn.epoch != self.epoch or not conn.ready):
                await self._ready()
            w = _Waiter(expect)
            self._waiter = w
            try:
                if callable(method):
                    method()
                else:
                    conn._send_method(self.number, method)
                with anyio.fail_after(conn.operation_timeout):
                    await w.event.wait()
            finally:
                self._waiter = None
        if w.error is not None:
            raise w.error
        return w.result

    async def _ready(self) -> None:
        if self._closed is not None:
            raise self._closed
        conn = self._conn
        if not conn.ready or conn.epoch != self.epoch:
            await conn._wait_ready()
        if self._closed is not None:
            raise self._closed

    def _check_sendable(self) -> None:
        if self._closed is not None:
            raise self._closed
        conn = self._conn
        if not conn.ready or conn.epoch != self.epoch:
            raise conn._lost_reason or ConnectionClosed(0, "connection is down (reconnecting)")

    # ---------------------------------------------------------------- hooks from the reader
    def _on_method(self, method: Any) -> None:
        # pamqp types every argument Optional (its constructors' default); decoded ones are set
        if isinstance(method, cmd.Channel.Close):
            self._die(ChannelClosed(method.reply_code,  # type: ignore[arg-type]
                                    method.reply_text, method.class_id,  # type: ignore[arg-type]
                                    method.method_id))  # type: ignore[arg-type]
            return
        if isinstance(method, cmd.Basic.Cancel):  # broker-side cancel (queue deleted)
            consumer = self.consumers.pop(method.consumer_tag, None)  # type: ignore[arg-type]
            if consumer is not None:
                consumer.cancelled_by_broker = True
                consumer._end()
            if not method.nowait:
                self._conn._send_method(self.number, cmd.Basic.CancelOk(method.consumer_tag))
            return
        if isinstance(method, cmd.Channel.Flow):
            self._conn._send_method(self.number, cmd.Channel.FlowOk(method.active))
            return
        w = self._waiter
        if w is not None and isinstance(method, w.expect):
            w.result = method
            w.event.set()
        else:
            log.debug("channel %s: unexpected %s dropped", self.number, method.name)

    def _on_message(self, msg: Message) -> None:
        msg.channel = self
        msg.epoch = self.epoch
        if msg.kind == "deliver":
            consumer = self.consumers.get(msg.consumer_tag)
            if consumer is not None:
                consumer._deliver(msg)
            return
        if msg.kind == "get":
            w = self._waiter
            if w is not None:
                w.result = msg
                w.event.set()
            return
        self._confirms.on_return(msg)  # Basic.Return
        self._conn._notify(msg)

    def _on_confirm(self, tag: int, multiple: bool, ack: bool) -> None:
        self._confirms.on_confirm(tag, multiple, ack)

    def _fail_pending(self, error: BaseException) -> None:
        self._confirms.fail(error)

    def _connection_lost(self, error: BaseException, final: bool) -> None:
        w = self._waiter
        if w is not None:
            w.error = error
            w.event.set()
        self._fail_pending(error)
        self._confirms.reset()
        if self._tx_ops:  # the broker discarded the uncommitted transaction with the connection
            self._tx_lost += self._tx_ops
            self._tx_ops = 0
        if final:
            self._closed = error
            for consumer in self.consumers.values():
                consumer._end(error)
            self.consumers.clear()

    def _die(self, error: ChannelClosed) -> None:
        self._closed = error
        self._conn._channel_gone(self)
        w = self._waiter
        if w is not None:
            w.error = error
            w.event.set()
        self._fail_pending(error)
        for consumer in self.consumers.values():
            consumer._end(error)
        self.consumers.clear()

    async def _recover(self) -> None:
        """Reopen on a new connection and replay qos, confirm/tx mode and consumers."""
        self._confirms.reset()
        await self._open()
        if self._qos is not None:
            await self._rpc(cmd.Basic.Qos(self._qos[1], self._qos[0], self._qos[2]),
                            (cmd.Basic.QosOk,), recovering=True)
        if self.confirm_mode:
            await self._rpc(cmd.Confirm.Select(), (cmd.Confirm.SelectOk,), recovering=True)
        if self.tx_mode:
            await self._rpc(cmd.Tx.Select(), (cmd.Tx.SelectOk,), recovering=True)

    async def _recover_consumers(self) -> None:
        for consumer in list(self.consumers.values()):
            queue = self._conn._topology.renamed.get(consumer.queue, consumer.queue)
            consumer.queue = queue
            try:
                await self._rpc(cmd.Basic.Consume(0, queue, consumer.tag, False, consumer.no_ack,
                                                  consumer.exclusive, False, consumer.arguments),
                                (cmd.Basic.ConsumeOk,), recovering=True)
            except ChannelClosed as exc:
                log.warning("could not recover consumer %s on %r: %s", consumer.tag, queue, exc)
                return

    # ------------------------------------------------------------------------- channel
    async def close(self) -> None:
        """Channel.Close (200); idempotent. Pending confirms fail with ``ChannelClosed``."""
        if self._closed is not None:
            return
        conn = self._conn
        if conn.ready and conn.epoch == self.epoch:
            try:
                await self._rpc(cmd.Channel.Close(200, "Normal shutdown", 0, 0),
                                (cmd.Channel.CloseOk,))
            except (ConnectionClosed, TimeoutError):
                pass
        if self._closed is None:
            self._die(ChannelClosed(200, "Normal shutdown"))
        else:
            self._conn._channel_gone(self)

    async def __aenter__(self) -> Channel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.close()

    # ------------------------------------------------------------------------ exchange
    async def exchange_declare(self, exchange: str, exchange_type: str = "direct", *,
                               passive: bool = False, durable: bool = False,
                               auto_delete: bool = False, internal: bool = False,
                               arguments: dict | None = None) -> None:
        """Exchange.Declare. Raises ``ChannelClosed`` 404 (passive, missing), 406 (exists with
        other settings), 403 (``amq.*`` name), ``ConnectionClosed`` 503 (unknown type)."""
        await self._rpc(cmd.Exchange.Declare(0, exchange, exchange_type, passive, durable,
                                             auto_delete, internal, False, arguments),
                        (cmd.Exchange.DeclareOk,))
        if not passive:
            self._conn._topology.exchanges[exchange] = dict(
                exchange_type=exchange_type, durable=durable, auto_delete=auto_delete,
                internal=internal, arguments=arguments)

    async def exchange_delete(self, exchange: str, *, if_unused: bool = False) -> None:
        """Exchange.Delete. Raises ``ChannelClosed`` 406 (if_unused and bound), 403 (amq.*)."""
        await self._rpc(cmd.Exchange.Delete(0, exchange, if_unused), (cmd.Exchange.DeleteOk,))
        self._conn._topology.forget_exchange(exchange)

    async def exchange_bind(self, destination: str, source: str, routing_key: str = "", *,
                            arguments: dict | None = None) -> None:
        """Exchange.Bind (RabbitMQ extension). Raises ``ChannelClosed`` 404 (either missing)."""
        await self._rpc(cmd.Exchange.Bind(0, destination, source, routing_key, False, arguments),
                        (cmd.Exchange.BindOk,))
        self._conn._topology.add_binding("exchange", destination, source, routing_key, arguments)

    async def exchange_unbind(self, destination: str, source: str, routing_key: str = "", *,
                              arguments: dict | None = None) -> None:
        """Exchange.Unbind. Raises ``ChannelClosed`` 404 (either exchange missing)."""
        await self._rpc(cmd.Exchange.Unbind(0, destination, source, routing_key, False, arguments),
                        (cmd.Exchange.UnbindOk,))
        self._conn._topology.remove_binding("exchange", destination, source, routing_key, arguments)

    # --------------------------------------------------------------------------- queue
    async def queue_declare(self, queue: str = "", *, passive: bool = False, durable: bool = False,
                            exclusive: bool = False, auto_delete: bool = False,
                            arguments: dict | None = None) -> cmd.Queue.DeclareOk:
        """Queue.Declare; returns DeclareOk (``queue`` name, ``message_count`` ready messages,
        ``consumer_count``). "" asks the broker for a name. Raises ``ChannelClosed`` 404
        (passive, missing), 405 (exclusive to another connection), 406 (other settings or bad
        x-argument), 403 (``amq.`` prefix)."""
        ok = await self._rpc(cmd.Queue.Declare(0, queue, passive, durable, exclusive, auto_delete,
                                               False, arguments), (cmd.Queue.DeclareOk,))
        if not passive:
            self._conn._topology.queues[ok.queue] = dict(
                requested=queue, durable=durable, exclusive=exclusive, auto_delete=auto_delete,
                arguments=arguments)
        return ok

    async def queue_bind(self, queue: str, exchange: str, routing_key: str = "", *,
                         arguments: dict | None = None) -> None:
        """Queue.Bind. Raises ``ChannelClosed`` 404 (queue or exchange missing)."""
        await self._rpc(cmd.Queue.Bind(0, queue, exchange, routing_key, False, arguments),
                        (cmd.Queue.BindOk,))
        self._conn._topology.add_binding("queue", queue, exchange, routing_key, arguments)

    async def queue_unbind(self, queue: str, exchange: str, routing_key: str = "", *,
                           arguments: dict | None = None) -> None:
        """Queue.Unbind. Raises ``ChannelClosed`` 404 (queue or exchange missing)."""
        await self._rpc(cmd.Queue.Unbind(0, queue, exchange, routing_key, arguments),
                        (cmd.Queue.UnbindOk,))
        self._conn._topology.remove_binding("queue", queue, exchange, routing_key, arguments)

    async def queue_purge(self, queue: str) -> int:
        """Queue.Purge; returns the number of messages removed. ``ChannelClosed`` 404 if missing."""
        ok = await self._rpc(cmd.Queue.Purge(0, queue), (cmd.Queue.PurgeOk,))
        return ok.message_count

    async def queue_delete(self, queue: str, *, if_unused: bool = False,
                           if_empty: bool = False) -> int:
        """Queue.Delete; returns the messages deleted with it. Raises ``ChannelClosed`` 406
        (if_unused/if_empty not met); a missing queue is not an error (RabbitMQ 3.x+)."""
        ok = await self._rpc(cmd.Queue.Delete(0, queue, if_unused, if_empty), (cmd.Queue.DeleteOk,))
        self._conn._topology.forget_queue(queue)
        return ok.message_count

    # --------------------------------------------------------------------------- basic
    async def basic_qos(self, prefetch_count: int = 0, prefetch_size: int = 0,
                        global_: bool = False) -> None:
        """Basic.Qos: at most ``prefetch_count`` unacked deliveries (0: no limit) per consumer
        (per channel when ``global_``, RabbitMQ's reading); ``prefetch_size`` in bytes (RabbitMQ
        refuses non-zero with 540, a ``ConnectionClosed``)."""
        await self._rpc(cmd.Basic.Qos(prefetch_size, prefetch_count, global_), (cmd.Basic.QosOk,))
        self._qos = (prefetch_count, prefetch_size, global_)

    async def basic_consume(self, queue: str, *, no_ack: bool = False, exclusive: bool = False,
                            consumer_tag: str = "", arguments: dict | None = None) -> Consumer:
        """Basic.Consume; returns the ``Consumer`` to iterate. Raises ``ChannelClosed`` 404
        (queue missing), 403 (exclusive consumer exists / exclusive queue of another
        connection), 530-class errors as ``ConnectionClosed`` (duplicate tag)."""
        tag = consumer_tag or f"ctag-{next(_tags)}"
        consumer = Consumer(self, queue, tag, no_ack, exclusive, arguments)
        self.consumers[tag] = consumer
        try:
            await self._rpc(cmd.Basic.Consume(0, queue, tag, False, no_ack, exclusive, False,
                                              arguments), (cmd.Basic.ConsumeOk,))
        except BaseException:
            self.consumers.pop(tag, None)
            raise
        return consumer

    async def basic_cancel(self, consumer_tag: str) -> None:
        """Basic.Cancel; ends that consumer's iteration. Unknown tags are ignored."""
        consumer = self.consumers.get(consumer_tag)
        if consumer is None or self._closed is not None:
            return
        try:
            await self._rpc(cmd.Basic.Cancel(consumer_tag), (cmd.Basic.CancelOk,))
        finally:
            self.consumers.pop(consumer_tag, None)
            consumer._end()

    async def basic_get(self, queue: str, *, no_ack: bool = False) -> Message | None:
        """Basic.Get: the next ready message (``message_count`` tells how many are left) or
        None when the queue is empty. Raises ``ChannelClosed`` 404 when the queue is missing."""
        reply = await self._rpc(cmd.Basic.Get(0, queue, no_ack), (cmd.Basic.GetEmpty,))
        return reply if isinstance(reply, Message) else None

    def _send_ack(self, tag: int, multiple: bool, epoch: int | None) -> bool:
        if epoch is not None and epoch != self.epoch:
            return False
        self._check_sendable()
        self._conn._send_raw(_HEAD.pack(1, self.number, 13) + _ACK_PREFIX
                             + _TAG_BITS.pack(tag, int(multiple)) + b"\xce")
        if self.tx_mode:
            self._tx_ops += 1
        return True

    async def basic_ack(self, delivery_tag: int = 0, multiple: bool = False, *,
                        epoch: int | None = None) -> bool:
        """Basic.Ack. With ``epoch`` (the message's), a tag from before a reconnect is not sent
        (the broker requeued it already) and False is returned. Raises ``ChannelClosed`` /
        ``ConnectionClosed`` when the channel is down; an unknown tag makes the broker close the
        channel with 406 PRECONDITION_FAILED (seen on the next call)."""
        return self._send_ack(delivery_tag, multiple, epoch)

    async def basic_nack(self, delivery_tag: int = 0, multiple: bool = False, requeue: bool = True,
                         *, epoch: int | None = None) -> bool:
        """Basic.Nack (RabbitMQ extension): requeue, or dead-letter/drop when not ``requeue``."""
        if epoch is not None and epoch != self.epoch:
            return False
        self._check_sendable()
        self._conn._send_method(self.number, cmd.Basic.Nack(delivery_tag, multiple, requeue))
        if self.tx_mode:
            self._tx_ops += 1
        return True

    async def basic_reject(self, delivery_tag: int, requeue: bool = True, *,
                           epoch: int | None = None) -> bool:
        """Basic.Reject one delivery; False when ``epoch`` is stale."""
        if epoch is not None and epoch != self.epoch:
            return False
        self._check_sendable()
        self._conn._send_method(self.number, cmd.Basic.Reject(delivery_tag, requeue))
        if self.tx_mode:
            self._tx_ops += 1
        return True

    async def basic_recover(self, requeue: bool = True) -> None:
        """Basic.Recover: redeliver every unacked message of this channel."""
        await self._rpc(cmd.Basic.Recover(requeue), (cmd.Basic.RecoverOk,))
