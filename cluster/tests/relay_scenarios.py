"""Relay loss scenarios with real brokers and real pika clients (issue 10), shared by the process
tests (``test_relay_processes.py``, once each in CI) and the bounded loop of
``python -m benchmarks.relay_loss`` (20 repetitions or more).

The scenario of the issue: three brokers, a durable shared queue declared on the first, a pika
consumer on the second with prefetch 200 that does not ack, a pika publisher on the first
publishing persistent messages with confirms, all confirmed; then ``kill -9`` of a broker (the
consumer's, or the publisher's), a restart with the same data directory, and a drain of the queue
from every broker. Every confirmed message must come back (duplicates are allowed: at least once).
``cut_link`` closes one peer link's socket with ``ss -K`` (the kernel's socket destroy), a link
failure without any broker dying. Every wait is bounded.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass, field

import pika
import pika.exceptions

from cluster.tests.processes import Cluster, Member, wait_for

__all__ = ["Outcome", "publish_confirmed", "HoldingConsumer", "drain",
           "consumer_kill_scenario", "publisher_kill_scenario", "cut_link"]


@dataclass
class Outcome:
    """What a scenario saw: bodies confirmed to the publisher, bodies drained at the end, and
    the drain's redelivered count. ``lost`` = confirmed but never drained."""

    confirmed: set[str] = field(default_factory=set)
    drained: list[str] = field(default_factory=list)
    redelivered: int = 0

    @property
    def lost(self) -> set[str]:
        return self.confirmed - set(self.drained)


def publish_confirmed(member: Member, queue: str, count: int, prefix: str = "m") -> set[str]:
    """Publish ``count`` persistent messages ``prefix-i`` with confirms on ``member``; returns the
    bodies confirmed (pika raises on a nack or return)."""
    conn = member.connect()
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        confirmed = set()
        for i in range(count):
            body = f"{prefix}-{i}"
            ch.basic_publish("", queue, body.encode(), props, mandatory=True)
            confirmed.add(body)
        return confirmed
    finally:
        conn.close()


class HoldingConsumer:
    """A pika consumer on ``member`` with prefetch ``prefetch`` that never acks, in a thread of
    its own; ``received`` lists bodies in arrival order. ``stop()`` ends it (closing its
    connection when the broker is still up)."""

    def __init__(self, member: Member, queue: str, prefetch: int) -> None:
        self.received: list[str] = []
        self.redelivered: list[str] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(member, queue, prefetch),
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise AssertionError("the holding consumer did not start")

    def _run(self, member: Member, queue: str, prefetch: int) -> None:
        try:
            conn = member.connect()
            ch = conn.channel()
            ch.basic_qos(prefetch_count=prefetch)

            def on_message(_ch, method, _props, body):
                self.received.append(body.decode())
                if method.redelivered:
                    self.redelivered.append(body.decode())

            ch.basic_consume(queue, on_message)
            self._ready.set()
            deadline = time.monotonic() + 120
            while not self._stop.is_set() and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.05)
            conn.close()
        except (pika.exceptions.AMQPError, OSError):
            self._ready.set()  # the broker died under it: that is the point

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def drain(members: list[Member], queue: str, quiet: float = 2.0,
          timeout: float = 60.0) -> tuple[list[str], int]:
    """Basic.Get with acks from every broker in turn until none has had a message for ``quiet``
    seconds; returns (bodies, how many were redelivered)."""
    conns = [m.connect() for m in members]
    channels = [c.channel() for c in conns]
    bodies: list[str] = []
    redelivered = 0
    last = time.monotonic()
    deadline = last + timeout
    try:
        while time.monotonic() - last < quiet and time.monotonic() < deadline:
            got = False
            for ch in channels:
                method, _props, body = ch.basic_get(queue, auto_ack=True)
                if method is not None:
                    bodies.append(body.decode())
                    redelivered += bool(method.redelivered)
                    got = True
            if got:
                last = time.monotonic()
            else:
                time.sleep(0.05)
    finally:
        for conn in conns:
            conn.close()
    return bodies, redelivered


def _one_view_of_three(*members: Member) -> bool:
    views = {tuple(m.members() or ()) for m in members}
    return len(views) == 1 and len(next(iter(views))) == 3


def _declare(member: Member, queue: str) -> None:
    conn = member.connect()
    try:
        conn.channel().queue_declare(queue, durable=True)
    finally:
        conn.close()


def consumer_kill_scenario(cluster: Cluster, messages: int = 1000, prefetch: int = 200,
                           queue: str = "relay-loss") -> Outcome:
    """The issue's scenario: kill -9 the broker whose consumer holds relayed messages."""
    n2, n3, n4 = cluster.start_three()
    _declare(n2, queue)
    holder = HoldingConsumer(n3, queue, prefetch)
    time.sleep(0.5)  # Cluster.Consumers reaches n2: it deals to n3
    outcome = Outcome()
    outcome.confirmed = publish_confirmed(n2, queue, messages)
    wait_for(lambda: len(holder.received) >= prefetch, 15,
             f"n3's consumer got {len(holder.received)} of {prefetch}")
    cluster.kill(n3)
    holder.stop()
    cluster.start(3, n2)
    wait_for(lambda: _one_view_of_three(n2, n3, n4), 20, "n3 did not rejoin")
    outcome.drained, outcome.redelivered = drain([n2, n3, n4], queue)
    return outcome


def publisher_kill_scenario(cluster: Cluster, messages: int = 1000, prefetch: int = 200,
                            queue: str = "relay-sender") -> Outcome:
    """kill -9 of the *sending* broker while its messages sit relayed at a consumer elsewhere:
    persistent messages in a durable queue come back when it restarts."""
    n2, n3, n4 = cluster.start_three()
    _declare(n2, queue)
    holder = HoldingConsumer(n3, queue, prefetch)
    time.sleep(0.5)
    outcome = Outcome()
    outcome.confirmed = publish_confirmed(n2, queue, messages)
    wait_for(lambda: len(holder.received) >= prefetch, 15,
             f"n3's consumer got {len(holder.received)} of {prefetch}")
    cluster.kill(n2)
    holder.stop()  # its unacked relayed deliveries cannot go back to the dead sender
    cluster.start(2, n3)
    wait_for(lambda: _one_view_of_three(n2, n3, n4), 20, "n2 did not rejoin")
    outcome.drained, outcome.redelivered = drain([n2, n3, n4], queue)
    return outcome


def cut_link(src: Member, dst: Member) -> int:
    """Destroy the TCP sockets of ``src``'s peer link to ``dst`` (``ss -K``, the socket-destroy
    netlink call; needs root): the link breaks, neither broker dies. Returns how many sockets
    matched."""
    assert src.proc is not None
    out = subprocess.run(["ss", "-tnpH", "state", "established", "dst", dst.address],
                         capture_output=True, text=True, timeout=10).stdout
    ports = []
    for line in out.splitlines():
        if f"pid={src.proc.pid}," not in line:
            continue
        local = line.split()[2]  # Recv-Q Send-Q Local Peer Process
        match = re.search(r":(\d+)$", local)
        if match:
            ports.append((local.rsplit(":", 1)[0], match.group(1)))
    for host, port in ports:
        subprocess.run(["ss", "-K", "src", host, "sport", "=", f":{port}", "dst", dst.address],
                       capture_output=True, timeout=10)
    return len(ports)
