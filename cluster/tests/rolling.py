"""A rolling restart of a real cluster under a confirmed load (issue 26), as RabbitMQ's "Upgrading
RabbitMQ" guide runs one: for each member in turn, ``ctl await_online_quorum_plus_one`` (is it
safe to stop?), ``ctl drain`` (clients closed with 320 go to the others, quorum-queue leaders
handed over), stop (SIGTERM), start again with the same data dir, name and address, wait until
it serves, ``ctl revive``. Meanwhile a pika publisher publishes persistent messages with
confirms to a quorum queue and a pika consumer consumes them with acks, each over the list of
every member (pika tries them in turn: a closed or refused connection goes to the next), both
reconnecting after any failure. Used by ``cluster/tests/test_rolling_restart_processes.py`` and
``benchmarks/rolling_restart.py`` (the figures in benchmarks/RESULTS.md). Every wait is bounded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pika
import pika.exceptions

from amqp_broker.management import ctl
from cluster.tests.processes import Cluster, Member, free_port, wait_for
from cluster.tests.quorum_scenarios import declare

__all__ = ["RollingPublisher", "RollingConsumer", "Roll", "start_cluster", "roll"]

#: Seconds a client waits before it connects again after a failure.
RECONNECT_S = 0.2
#: Seconds a client runs at most.
CLIENT_LIMIT_S = 600.0


def _params(members: list[Member], first: int) -> list[pika.URLParameters]:
    """Every member's URL parameters, starting at ``first`` (round robin): one attempt each,
    2 s socket timeout, 5 s heartbeat."""
    order = members[first % len(members):] + members[:first % len(members)]
    return [pika.URLParameters(m.uri + "?connection_attempts=1&socket_timeout=2&heartbeat=5")
            for m in order]


class _Client(threading.Thread):
    """A client thread that connects over the list of members until ``stop`` (``connects``:
    connections made; ``errors``: what ended each one early)."""

    def __init__(self, members: list[Member], queue: str) -> None:
        super().__init__(daemon=True)
        self.members, self.queue = members, queue
        self.connects = 0
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        deadline = time.monotonic() + CLIENT_LIMIT_S
        while not self.stopping.is_set() and time.monotonic() < deadline:
            conn = None
            try:
                conn = pika.BlockingConnection(_params(self.members, self.connects))
                self.connects += 1
                self.session(conn)
            except (pika.exceptions.AMQPError, OSError) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                self.stopping.wait(RECONNECT_S)
            finally:
                if conn is not None and conn.is_open:
                    try:
                        conn.close()
                    except (pika.exceptions.AMQPError, OSError):
                        pass

    def session(self, conn: pika.BlockingConnection) -> None:
        raise NotImplementedError

    def stop(self, timeout: float = 30.0) -> None:
        self.stopping.set()
        self.join(timeout)


class RollingPublisher(_Client):
    """Publishes ``m-<i>`` persistent, mandatory, one at a time with confirms (pika's blocking
    confirms); ``confirmed`` bodies and the monotonic time of each confirm in ``times``. A
    publish whose connection failed before its confirm is not counted (it may or may not be
    in the queue)."""

    def __init__(self, members: list[Member], queue: str) -> None:
        super().__init__(members, queue)
        self.confirmed: list[str] = []
        self.times: list[float] = []
        self._next = 0

    def session(self, conn: pika.BlockingConnection) -> None:
        ch = conn.channel()
        ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        while not self.stopping.is_set():
            body = f"m-{self._next}"
            self._next += 1
            ch.basic_publish("", self.queue, body.encode(), props, mandatory=True)
            self.confirmed.append(body)
            self.times.append(time.monotonic())


class RollingConsumer(_Client):
    """Consumes with manual acks (prefetch 100); ``received`` bodies (a redelivery twice)."""

    def __init__(self, members: list[Member], queue: str) -> None:
        super().__init__(members, queue)
        self.received: list[str] = []

    def session(self, conn: pika.BlockingConnection) -> None:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)

        def on_message(chan, method, _props, body) -> None:
            self.received.append(body.decode())
            chan.basic_ack(method.delivery_tag)

        ch.basic_consume(self.queue, on_message)
        while not self.stopping.is_set():
            conn.process_data_events(time_limit=0.1)


@dataclass
class Roll:
    """The outcome of ``roll``: seconds per member (``await_online_quorum_plus_one`` to
    ``revive``), the longest time between two confirms while members restarted (s), confirmed
    and received counts, confirmed messages never received, client connections made."""

    per_member: dict[str, float] = field(default_factory=dict)
    longest_unconfirmed_s: float = 0.0
    confirmed: int = 0
    received: int = 0
    lost: list[str] = field(default_factory=list)
    publisher_connects: int = 0
    consumer_connects: int = 0


def start_cluster(cluster: Cluster) -> tuple[list[Member], dict[str, str], dict[int, int]]:
    """n2, n3, n4 with their management APIs, in one agreed view: (members, API URL per
    name, management port per last octet)."""
    ports = {o: free_port(f"127.0.0.{o}") for o in (2, 3, 4)}
    n2 = cluster.start(2, None, "--management-port", str(ports[2]))
    # the two joiners start together (each waits for its own sync)
    n3 = cluster.start(3, n2, "--management-port", str(ports[3]), wait=False)
    n4 = cluster.start(4, n2, "--management-port", str(ports[4]), wait=False)
    members = [n2, n3, n4]
    wait_for(lambda: all(sorted(m.members() or []) == sorted(x.address for x in members)
                         for m in members), 40, "no agreed view")
    for m in (n3, n4):
        wait_for(m.serving, 30, f"{m.name} never served a client:\n{m.log_tail()}")
    urls = {f"n{o}": f"http://127.0.0.{o}:{p}" for o, p in ports.items()}
    return members, urls, ports


def _ctl(url: str, *args: str) -> None:
    code = ctl.main(["--url", url, *args])
    assert code == 0, f"ctl {' '.join(args)} at {url}: exit {code}"


def _more(pub: RollingPublisher, count: int) -> Callable[[], bool]:
    return lambda: len(pub.confirmed) > count


def roll(cluster: Cluster, members: list[Member], urls: dict[str, str], ports: dict[int, int],
         queue: str = "rolling", order: list[Member] | None = None,
         settle_s: float = 1.0) -> Roll:
    """Declare quorum queue ``queue``, start the clients, restart each of ``order`` (default:
    every member) in turn as the module docstring says, then stop the publisher and let the
    consumer take every confirmed message (bounded); the figures as a ``Roll``."""
    declare(members[0], queue)
    pub, con = RollingPublisher(members, queue), RollingConsumer(members, queue)
    pub.start()
    con.start()
    out = Roll()
    try:
        wait_for(lambda: len(pub.confirmed) >= 20 and len(con.received) >= 10, 60,
                 f"no traffic before the roll: {pub.errors[-3:]} {con.errors[-3:]}")
        started = time.monotonic()
        for member in order or members:
            octet = int(member.host.rsplit(".", 1)[1])
            seed = next(m for m in members if m is not member)
            url = urls[member.name]
            t0 = time.monotonic()
            _ctl(url, "await_online_quorum_plus_one", "--wait", "60")
            _ctl(url, "drain")
            cluster.terminate(member)
            cluster.start(octet, seed, "--management-port", str(ports[octet]))
            _ctl(url, "revive")
            out.per_member[member.name] = time.monotonic() - t0
            # publishing goes on before the next one stops
            wait_for(_more(pub, len(pub.confirmed) + 5), 60,
                     f"no confirms after {member.name} came back: {pub.errors[-3:]}")
            time.sleep(settle_s)
        ended = time.monotonic()
        times = [t for t in pub.times if started <= t <= ended]
        out.longest_unconfirmed_s = max((b - a for a, b in zip(times, times[1:], strict=False)),
                                        default=0.0)
    finally:
        pub.stop()
    try:
        expected = set(pub.confirmed)
        wait_for(lambda: expected <= set(con.received), 60, "confirmed messages not received")
    except AssertionError:
        pass   # reported as lost
    finally:
        con.stop()
    out.confirmed, out.received = len(pub.confirmed), len(set(con.received))
    out.lost = sorted(set(pub.confirmed) - set(con.received))
    out.publisher_connects, out.consumer_connects = pub.connects, con.connects
    return out
