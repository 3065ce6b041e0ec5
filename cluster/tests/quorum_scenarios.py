"""Helpers of the quorum queue process tests (issue 12): find a queue's Raft leader from the
brokers' logs, a confirming publisher and an acking consumer in threads of their own (pika), and
a drain. Every wait is bounded."""

from __future__ import annotations

import re
import threading
import time

import pika

from cluster.tests.processes import Cluster, Member, wait_for
from cluster.tests.relay_scenarios import HoldingConsumer

QUORUM = {"x-queue-type": "quorum"}
_LEADS = re.compile(r"quorum queue '([^']*)': this replica leads \(term (\d+)\)")


def leader_of(cluster: Cluster, queue: str, alive: list[Member] | None = None) -> Member | None:
    """The member whose log last claimed leadership of ``queue`` with the highest term."""
    best: tuple[int, Member] | None = None
    for m in alive or list(cluster.members.values()):
        try:
            text = m.log_path.read_text(errors="replace")
        except OSError:
            continue
        for name, term in _LEADS.findall(text):
            if name == queue and (best is None or int(term) > best[0]):
                best = (int(term), m)
    return best[1] if best else None


def declare(member: Member, queue: str, **arguments: object) -> None:
    """Declare quorum queue ``queue`` on ``member``."""
    conn = member.connect()
    try:
        conn.channel().queue_declare(queue, durable=True, arguments={**QUORUM, **arguments})
    finally:
        conn.close()


def message_count(member: Member, queue: str) -> int:
    """Queue.Declare passive's message count on ``member``."""
    conn = member.connect()
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


class Publisher:
    """Publishes ``prefix-i`` persistent messages with confirms on ``member`` (one at a time:
    pika's blocking confirms) until ``stop()`` or ``count``; ``confirmed`` bodies and the
    monotonic time of each confirm in ``times``."""

    def __init__(self, member: Member, queue: str, count: int, prefix: str = "m") -> None:
        self.confirmed: list[str] = []
        self.times: list[float] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(member, queue, count, prefix),
                                        daemon=True)
        self._thread.start()

    def _run(self, member: Member, queue: str, count: int, prefix: str) -> None:
        try:
            conn = member.connect()
            ch = conn.channel()
            ch.confirm_delivery()
            props = pika.BasicProperties(delivery_mode=2)
            for i in range(count):
                if self._stop.is_set():
                    break
                body = f"{prefix}-{i}"
                ch.basic_publish("", queue, body.encode(), props, mandatory=True)
                self.confirmed.append(body)
                self.times.append(time.monotonic())
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def stop(self, timeout: float = 30) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


class Consumer(HoldingConsumer):
    """Consumes ``queue`` on ``member`` with acks (prefetch ``prefetch``) in a thread;
    ``received`` bodies in order, ``redelivered`` the redelivered ones, ``headers`` each one's
    headers; ``error`` what ended it early. ``reject``: reject each one without requeue
    instead (dead-lettered) of acking it."""

    def __init__(self, member: Member, queue: str, prefetch: int = 100,
                 reject: bool = False) -> None:
        self.headers: list[dict] = []
        self.error: BaseException | None = None
        self.reject = reject
        super().__init__(member, queue, prefetch)

    def _run(self, member: Member, queue: str, prefetch: int) -> None:
        try:
            conn = member.connect()
            ch = conn.channel()
            ch.basic_qos(prefetch_count=prefetch)

            def on_message(_ch, method, props, body):
                self.received.append(body.decode())
                self.headers.append(dict(props.headers or {}))
                if method.redelivered:
                    self.redelivered.append(body.decode())
                if self.reject:
                    _ch.basic_reject(method.delivery_tag, requeue=False)
                else:
                    _ch.basic_ack(method.delivery_tag)

            ch.basic_consume(queue, on_message)
            self._ready.set()
            deadline = time.monotonic() + 300
            while not self._stop.is_set() and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.1)
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
            self._ready.set()


def drain(member: Member, queue: str, quiet: float = 2.0, timeout: float = 60) -> list[str]:
    """Consume (ack) from ``member`` until nothing arrives for ``quiet`` seconds."""
    got: list[str] = []
    conn = member.connect()
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=500)
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        for method, _props, body in ch.consume(queue, inactivity_timeout=0.2):
            if method is not None:
                got.append(body.decode())
                ch.basic_ack(method.delivery_tag)
                last = time.monotonic()
            elif time.monotonic() - last > quiet or time.monotonic() > deadline:
                break
        ch.cancel()
    finally:
        conn.close()
    return got


def wait_leader(cluster: Cluster, queue: str, timeout: float = 15,
                alive: list[Member] | None = None) -> Member:
    """The queue's leader once one claimed it (bounded)."""
    found: list[Member] = []

    def check() -> bool:
        m = leader_of(cluster, queue, alive)
        if m is not None:
            found[:] = [m]
        return m is not None

    wait_for(check, timeout, f"no leader of {queue!r}")
    return found[0]
