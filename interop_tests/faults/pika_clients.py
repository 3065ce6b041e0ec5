"""pika workload clients: a publisher with confirms (SelectConnection) and an acking consumer
(BlockingConnection), each pinned to one broker and run in its own thread.

The publisher is asynchronous because a blocking pika publish waits for its confirm without a
time limit; the workload must record a publish unanswered for ``confirm_timeout`` s as unknown
(``info``), as RabbitMQ's Jepsen suite does with its publish-confirm timeout. Each publish is
persistent (delivery mode 2), mandatory, to the default exchange with the queue's name as routing
key, body and ``message_id`` the id. Outcomes (history ``publish`` events): ``ok`` on Basic.Ack,
``fail`` on Basic.Nack, on a Basic.Return (then Ack) or when the channel or connection closes
with the publish outstanding; ``info`` when ``confirm_timeout`` passes first (an Ack arriving
later is recorded ``ok`` with ``late: true``). After a failure the client reconnects after
``reconnect_delay`` s, at most ``max_connects`` times, until ``stop`` is set.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pika
import pika.exceptions
from pika.spec import Basic

from .clients_common import (
    ClientSettings,
    IdSource,
    StreamPosition,
    parse_id,
    publish_headers,
    record_delivery,
)
from .history import History

__all__ = ["PikaConsumer", "PikaPublisher", "connection_parameters"]


def connection_parameters(url: str, heartbeat: int) -> pika.URLParameters:
    """pika parameters for ``url``: one attempt, 2 s socket and connect timeouts."""
    params = pika.URLParameters(url)
    params.heartbeat = heartbeat
    params.connection_attempts = 1
    params.socket_timeout = 2
    params.blocked_connection_timeout = 10
    params.stack_timeout = 5
    return params


class PikaPublisher(threading.Thread):
    """Publishes ids to broker ``url`` at ``settings.rate`` per second with at most
    ``settings.window`` unconfirmed, until ``stop``; then waits up to ``confirm_timeout`` s
    for the outstanding confirms and closes."""

    def __init__(self, name: str, broker: str, url: str, settings: ClientSettings,
                 ids: IdSource, history: History, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.client, self.broker, self.url = name, broker, url
        self.settings, self.ids, self.history, self.stop_event = settings, ids, history, stop
        self._conn: Any = None
        self._channel: Any = None
        self._seq = 0
        self._outstanding: dict[int, tuple[int, float]] = {}   # seq -> (id, sent monotonic s)
        self._expired: dict[int, int] = {}                     # seq -> id, recorded info
        self._returned: set[int] = set()
        self._stop_since: float | None = None

    def run(self) -> None:
        """Connect, publish, reconnect after failures; bounded by ``stop`` and max_connects."""
        for _ in range(self.settings.max_connects):
            if self.stop_event.is_set():
                break
            self._session()
            self.stop_event.wait(self.settings.reconnect_delay)

    def _record(self, kind: str, ident: int, **extra: Any) -> None:
        self.history.record("publish", type=kind, id=ident, client=self.client,
                            broker=self.broker, **extra)

    def _session(self) -> None:
        self._seq = 0
        self._outstanding.clear()
        self._expired.clear()
        self._returned.clear()
        self._channel = None
        try:
            self._conn = pika.SelectConnection(
                connection_parameters(self.url, self.settings.heartbeat),
                on_open_callback=self._on_open, on_open_error_callback=self._on_open_error,
                on_close_callback=self._on_closed)
            self._conn.ioloop.start()
        except Exception as exc:   # a failure outside the callbacks ends this session only
            self.history.record("client", client=self.client, event="error", error=repr(exc))
        finally:
            self._fail_outstanding("session ended")

    def _on_open(self, conn: Any) -> None:
        self.history.record("client", client=self.client, event="connected")
        conn.channel(on_open_callback=self._on_channel)

    def _on_open_error(self, conn: Any, exc: BaseException) -> None:
        self.history.record("client", client=self.client, event="connect-failed",
                            error=repr(exc)[:200])
        conn.ioloop.stop()

    def _on_closed(self, conn: Any, reason: BaseException) -> None:
        self.history.record("client", client=self.client, event="closed", error=repr(reason)[:200])
        self._fail_outstanding(f"connection closed: {reason!r}"[:200])
        conn.ioloop.stop()

    def _on_channel(self, channel: Any) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(ack_nack_callback=self._on_confirm,
                                 callback=lambda _frame: self._tick())

    def _on_channel_closed(self, channel: Any, reason: BaseException) -> None:
        self._fail_outstanding(f"channel closed: {reason!r}"[:200])
        self._channel = None
        if self._conn is not None and self._conn.is_open:
            self._conn.close()

    def _on_return(self, channel: Any, method: Any, props: Any, body: bytes) -> None:
        ident = parse_id(body)
        if ident is not None:
            self._returned.add(ident)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        tag, multiple = method.delivery_tag, method.multiple
        seqs = [s for s in list(self._outstanding) + list(self._expired)
                if s == tag or (multiple and s <= tag)]
        nack = isinstance(method, Basic.Nack)
        for seq in seqs:
            late = seq in self._expired
            ident = self._expired.pop(seq) if late else self._outstanding.pop(seq)[0]
            if nack:
                self._record("fail", ident, error="nack")
            elif ident in self._returned:
                self._record("fail", ident, error="returned")
            elif late:
                self._record("ok", ident, late=True)
            else:
                self._record("ok", ident)

    def _fail_outstanding(self, why: str) -> None:
        for ident, _sent in self._outstanding.values():
            self._record("fail", ident, error=why)
        self._outstanding.clear()
        self._expired.clear()

    def _expire(self, now: float) -> None:
        for seq, (ident, sent) in list(self._outstanding.items()):
            if now - sent > self.settings.confirm_timeout:
                del self._outstanding[seq]
                self._expired[seq] = ident
                self._record("info", ident, error="confirm timeout")

    def _tick(self) -> None:
        """One step of the publish loop, rescheduled on the ioloop every 1/rate s."""
        conn, channel = self._conn, self._channel
        if conn is None or channel is None or not channel.is_open:
            return
        now = time.monotonic()
        self._expire(now)
        if self.stop_event.is_set():
            self._stop_since = self._stop_since or now
            if not self._outstanding or now - self._stop_since > self.settings.confirm_timeout:
                self._expire(now + self.settings.confirm_timeout + 1)
                conn.close()
                return
        elif len(self._outstanding) < self.settings.window:
            ident = self.ids.next()
            self._record("invoke", ident)
            self._seq += 1
            self._outstanding[self._seq] = (ident, now)
            channel.basic_publish(
                self.settings.exchange, self.settings.queue, str(ident).encode(),
                pika.BasicProperties(delivery_mode=2, message_id=str(ident),
                                     headers=publish_headers(self.settings)), mandatory=True)
        conn.ioloop.call_later(1.0 / self.settings.rate, self._tick)


class PikaConsumer(threading.Thread):
    """Consumes ``settings.queue`` on broker ``url`` (prefetch ``settings.prefetch``), records
    every delivery and acks it after ``ack_delay`` s, until ``stop``; reconnects after a failure.
    ``drain=True`` marks its deliveries as the final drain's; ``last_delivery`` is the monotonic
    time of the latest delivery (for the drain's quiet test); ``position``: where a stream
    consumer resumes (``settings.stream``)."""

    def __init__(self, name: str, broker: str, url: str, settings: ClientSettings,
                 history: History, stop: threading.Event, drain: bool = False) -> None:
        super().__init__(name=name, daemon=True)
        self.client, self.broker, self.url = name, broker, url
        self.settings, self.history, self.stop_event, self.drain = settings, history, stop, drain
        self.last_delivery = time.monotonic()
        self.deliveries = 0
        self.position = StreamPosition()

    def run(self) -> None:
        """Consume until ``stop``; bounded by max_connects connection attempts."""
        for _ in range(self.settings.max_connects):
            if self.stop_event.is_set():
                break
            try:
                self._session()
            except (pika.exceptions.AMQPError, OSError, AttributeError, ValueError) as exc:
                self.history.record("client", client=self.client, event="error",
                                    error=repr(exc)[:200])
            self.stop_event.wait(self.settings.reconnect_delay)

    def _session(self) -> None:
        conn = pika.BlockingConnection(connection_parameters(self.url, self.settings.heartbeat))
        self.history.record("client", client=self.client, event="connected")
        try:
            channel = conn.channel()
            channel.basic_qos(prefetch_count=self.settings.prefetch)
            channel.basic_consume(self.settings.queue, self._on_message, arguments=(
                self.position.arguments() if self.settings.stream else None))
            while not self.stop_event.is_set():
                conn.process_data_events(time_limit=0.2)
        finally:
            if conn.is_open:
                try:
                    conn.close()
                except (pika.exceptions.AMQPError, OSError):
                    pass

    def _on_message(self, channel: Any, method: Any, props: Any, body: bytes) -> None:
        self.last_delivery = time.monotonic()
        self.deliveries += 1
        offset = self.position.read(props.headers) if self.settings.stream else None
        record_delivery(self.history, self.client, self.broker, body, bool(method.redelivered),
                        self.drain, offset)
        if self.settings.ack_delay > 0 and not self.drain:
            time.sleep(self.settings.ack_delay)
        channel.basic_ack(method.delivery_tag)
