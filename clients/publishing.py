"""What a ``clients.channel.Channel`` sends and how it learns it arrived: Basic.Publish (one,
``publish_nowait``, or many with flow control, ``publish_batch``), waiting for publisher confirms
(``wait_confirmations``, ``wait_for_confirms``), confirm mode and transactions (``tx_*``).

``Publishing`` is a mixin of ``Channel`` (``class Channel(Publishing)``): it holds no state of its
own and uses the channel's (declared below for the type checker). See ``clients/channel.py`` for
what happens to publishes when the connection drops.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from pamqp import commands as cmd

from .confirms import Confirmation, ConfirmTracker, failure_of, wait_all
from .errors import ChannelClosed, ConfirmsLost, ConnectionClosed
from .message import Message, Properties, encode_properties, encode_routing

if TYPE_CHECKING:
    from .aio import Connection

__all__ = ["Publishing"]


class Publishing:
    """The publish, confirm and tx methods of ``clients.channel.Channel``."""

    # the channel's state, set by ``Channel.__init__``
    _conn: Connection
    _closed: BaseException | None
    _confirms: ConfirmTracker
    _routing: dict[tuple[str, str, bool], bytes]
    number: int
    epoch: int
    confirm_mode: bool
    tx_mode: bool
    _tx_ops: int
    _tx_lost: int

    if TYPE_CHECKING:  # the channel's plumbing, defined by ``Channel``
        def _check_sendable(self) -> None: ...

        async def _ready(self) -> None: ...

        async def _rpc(self, method: Any, expect: tuple[type, ...],
                       recovering: bool = False) -> Any: ...

    def publish_nowait(self, body: bytes | str, exchange: str = "", routing_key: str = "",
                       properties: Properties | None = None, *, mandatory: bool = False,
                       props_raw: bytes | None = None) -> Confirmation | None:
        """Queue one Basic.Publish without waiting; returns its ``Confirmation`` in confirm mode,
        else None. ``body``: bytes (str is UTF-8 encoded). ``props_raw``: properties already
        encoded with ``message.encode_properties`` (reuse it for many messages). Nothing is
        written until the caller awaits something (``publish``, ``conn.drain()``, a sleep);
        ``publish_batch`` is the public way to write many with flow control.
        Raises ``ChannelClosed``/``ConnectionClosed`` when the channel is down now (a message
        queued here and lost with the connection fails its ``Confirmation``; it is not re-sent)."""
        if self._closed is not None or not self._conn.ready or self._conn.epoch != self.epoch:
            self._check_sendable()
        if body.__class__ is str:
            body = body.encode()
        key = (exchange, routing_key, mandatory)
        routing = self._routing.get(key)
        if routing is None:
            routing = encode_routing(exchange, routing_key, mandatory)
            if len(self._routing) > 1024:
                self._routing.clear()
            self._routing[key] = routing
        if props_raw is None:
            props_raw = encode_properties(properties)
        # a str body was encoded above (mypy does not narrow on ``__class__ is``)
        self._conn._proto.send_publish(self.number, routing, cast(bytes, body), props_raw)
        if not self.confirm_mode:
            if self.tx_mode:
                self._tx_ops += 1
            return None
        confirmation = self._confirms.add(mandatory, exchange, routing_key)
        return confirmation

    async def basic_publish(self, body: bytes | str, exchange: str = "", routing_key: str = "",
                            properties: Properties | None = None, *, mandatory: bool = False,
                            wait: bool = True, timeout: float | None = None) -> Confirmation | None:
        """Publish one message. Waits for a reconnect when the connection is down, for the
        socket buffer to drain when over ``conn.high_water`` bytes, and in confirm mode (unless
        ``wait`` is False) for the broker's answer, at most ``timeout`` seconds (default
        ``conn.operation_timeout``). Raises ``PublishNacked``, ``MessageReturned`` (mandatory,
        312 NO_ROUTE), ``ChannelClosed`` (e.g. 404 exchange missing), ``ConnectionClosed``
        (the connection dropped after the message was queued, even if it reconnected since:
        the message may or may not have reached the broker and is not re-sent; retry with the
        same message_id), ``TimeoutError``. Outside confirm mode nothing tells whether the
        message arrived; returns its ``Confirmation`` (None outside confirm mode)."""
        if self._closed is not None or not self._conn.ready or self._conn.epoch != self.epoch:
            await self._ready()
        confirmation = self.publish_nowait(body, exchange, routing_key, properties,
                                           mandatory=mandatory)
        conn = self._conn
        if conn._proto.buffered >= conn.high_water:
            await conn.drain()
        else:
            conn._kick()
        if confirmation is not None and wait:
            await confirmation.wait(conn.operation_timeout if timeout is None else timeout)
        return confirmation

    publish = basic_publish

    async def publish_batch(self, messages: Iterable[Any], exchange: str = "",
                            routing_key: str = "", properties: Properties | None = None, *,
                            mandatory: bool = False) -> list[Confirmation]:
        """Write many Basic.Publish in one go and return their ``Confirmation`` objects (in
        order; an empty list outside confirm mode). Does not wait for the confirms: pass the
        list to ``wait_confirmations`` (or call ``wait_for_confirms``).

        ``messages``: each item is a body (``bytes``/``str``, sent with ``routing_key`` and
        ``properties``), or a tuple ``(body, routing_key)`` or ``(body, routing_key, props)``
        where ``props`` is a ``Properties``, bytes already encoded with
        ``message.encode_properties`` (fastest: encode once, reuse), or None for
        ``properties``. All go to ``exchange`` with ``mandatory``.
        Waits for a reconnect first when the connection is down; while writing, waits for the
        writer whenever more than ``conn.high_water`` bytes are queued, and returns once every
        byte was handed to the socket (bounded by ``conn.operation_timeout``, ``TimeoutError``).

        Raises ``ChannelClosed`` (channel closed), ``ConnectionClosed`` outside confirm mode
        or ``ConfirmsLost`` in confirm mode (``unconfirmed``: messages of this batch already
        written) when the connection drops while writing: the rest of the batch was not sent,
        nothing of it is re-sent, so re-send the whole batch (same message ids). ``ValueError``
        / ``TypeError`` for a bad item (the items before it were sent)."""
        conn = self._conn
        if self._closed is not None or not conn.ready or conn.epoch != self.epoch:
            await self._ready()
        default_raw = encode_properties(properties)
        publish = self.publish_nowait
        high = conn.high_water
        confirmations: list[Confirmation] = []
        append = confirmations.append
        try:
            for item in messages:
                if item.__class__ is tuple:
                    body = item[0]
                    key = item[1] if len(item) > 1 else routing_key
                    props = item[2] if len(item) > 2 else None
                    if props is None:
                        raw = default_raw
                    elif props.__class__ is bytes:
                        raw = props
                    else:
                        raw = encode_properties(props)
                else:
                    body, key, raw = item, routing_key, default_raw
                confirmation = publish(body, exchange, key, mandatory=mandatory, props_raw=raw)
                if confirmation is not None:
                    append(confirmation)
                if conn._proto.buffered >= high:
                    await conn.drain()
            await conn.drain()
        except ConnectionClosed as exc:
            if not confirmations or isinstance(exc, ChannelClosed):
                raise
            for c in confirmations:
                c.reported = True
            raise ConfirmsLost(len(confirmations), exc,
                               [c.delivery_tag for c in confirmations[:1000]]) from exc
        return confirmations

    async def wait_confirmations(self, confirmations: Iterable[Confirmation | None],
                                 timeout: float | None = None) -> None:
        """Wait until each of ``confirmations`` (from ``publish_batch``/``publish_nowait``;
        None entries are skipped) is answered, within ``timeout`` seconds in all (default
        ``conn.operation_timeout``; ``TimeoutError``). Then raises, if any failed:
        ``ChannelClosed`` (the channel is gone), ``ConfirmsLost`` (``unconfirmed`` of them were
        lost with the connection, even if it reconnected since), ``PublishNacked`` (every
        nacked tag), ``MessageReturned`` (the first mandatory message returned). Failures raised
        here are not raised again by ``wait_for_confirms``."""
        conn = self._conn
        conn._kick()
        await wait_all(confirmations, conn.operation_timeout if timeout is None else timeout)

    async def wait_for_confirms(self, timeout: float | None = None) -> list[Message]:
        """Wait until every publish so far is answered (at most ``timeout`` seconds, default
        ``conn.operation_timeout``). Returns the messages returned by the broker (mandatory,
        unroutable) since the last call. Raises, for the publishes since the last call whose
        failure was not already raised (by ``Confirmation.wait``, ``basic_publish``,
        ``wait_confirmations``...): ``ChannelClosed`` if the channel was closed;
        ``ConfirmsLost`` (a ``ConnectionClosed``: ``unconfirmed`` counts them) if publishes
        were lost unanswered with the connection, also when it has reconnected since (they
        are not re-sent: re-publish them); ``PublishNacked`` with every nacked tag;
        ``ConnectionClosed`` if the connection is gone for good; ``TimeoutError``."""
        conn = self._conn
        conn._kick()
        timeout = conn.operation_timeout if timeout is None else timeout
        failed, returned = await self._confirms.wait_all(timeout)
        closed = self._closed
        if isinstance(closed, ChannelClosed):
            for c in failed:
                c.reported = True
            raise closed
        error = failure_of(failed)
        if error is not None:
            raise error
        if closed is not None:
            raise closed
        return returned

    # ----------------------------------------------------------------- confirm and tx
    async def confirm_select(self) -> None:
        """Confirm.Select: from now on every publish is answered with Basic.Ack/Nack."""
        if not self.confirm_mode:
            await self._rpc(cmd.Confirm.Select(), (cmd.Confirm.SelectOk,))
            self.confirm_mode = True

    async def tx_select(self) -> None:
        """Tx.Select. Raises ``ChannelClosed`` 406 on a channel in confirm mode."""
        await self._rpc(cmd.Tx.Select(), (cmd.Tx.SelectOk,))
        self.tx_mode = True

    async def tx_commit(self) -> None:
        """Tx.Commit. Raises ``ChannelClosed`` 406 when not in tx mode; ``ConnectionClosed``
        when the connection drops before Commit-Ok (the outcome is unknown), and also when
        publishes/acks of this transaction were sent on a connection that dropped since the
        last commit (the broker discarded them with it): then whatever was sent after the
        reconnect is rolled back too, nothing is committed, and the caller redoes the whole
        transaction."""
        conn = self._conn

        def send_commit() -> None:  # called in the epoch the commit goes out on
            if self._tx_lost:
                raise _TxLost
            conn._send_method(self.number, cmd.Tx.Commit())

        try:
            await self._rpc(send_commit, (cmd.Tx.CommitOk,))
        except _TxLost:
            lost, self._tx_lost, self._tx_ops = self._tx_lost, 0, 0
            try:
                await self._rpc(cmd.Tx.Rollback(), (cmd.Tx.RollbackOk,))
            except (ConnectionClosed, TimeoutError):
                pass  # the transaction dies with that connection anyway
            raise ConnectionClosed(0, f"transaction lost with the connection: {lost} "
                                      f"publish(es)/ack(s) since the last commit were discarded "
                                      f"by the broker; nothing was committed, redo the "
                                      f"transaction") from None
        finally:  # committed, or the caller was told it was not: a new transaction begins
            self._tx_ops = 0
            self._tx_lost = 0

    async def tx_rollback(self) -> None:
        """Tx.Rollback (also forgets publishes/acks lost with an earlier connection). Raises
        ``ChannelClosed`` 406 when not in tx mode."""
        try:
            await self._rpc(cmd.Tx.Rollback(), (cmd.Tx.RollbackOk,))
        finally:
            self._tx_ops = 0
            self._tx_lost = 0



class _TxLost(Exception):
    """Internal: a commit found its transaction's operations lost with a connection."""
