"""The definitions workload (issue 23): clients on every member change the same few names.

One client thread per broker, pinned to it, makes a random change at each round (every
``1 / rate`` s, all clients at once), on the names drawn for that round by an RNG all clients
share, so that clients on different members change the same name at the same moment (as two
service instances starting together, or two operators); the kind of change and its values are
each client's own draw: durable queues ``d.q0``-``d.q3``
declared with ``x-max-length`` 10, 20 or none (an inequivalent redeclare is a 406) and deleted;
durable exchanges ``d.x0``-``d.x2`` declared ``direct`` (now and then ``fanout``: 406 when it
exists as direct) and deleted; bindings ``d.xJ -> d.qK`` with routing key ``a`` or ``b`` bound
(404 when either is missing) and unbound, over AMQP (pika, as the harness's user); users
``d.u0``, ``d.u1`` PUT with a ``password_hash`` the client computes (so its value is known) and
deleted, their permissions on ``/`` set and cleared, policies ``d.p0``, ``d.p1`` set with
``max-length`` 10 or 20 and cleared, over the management API (``http://<broker>:15672/api``;
RabbitMQ "Management HTTP API").

Each change is a history ``define`` event pair (:mod:`interop_tests.faults.defs_check`):
``invoke`` with ``action`` (put/delete), ``key`` (the name as ``defs_check.keyed`` spells it)
and ``value`` (what ``keyed`` will show for it), then ``ok``, ``fail`` (an AMQP Channel.Close, an
HTTP 4xx: refused, not applied) or ``info`` (connection lost, timeout, an HTTP 5xx: unknown).
After the heal, :func:`read_definitions` reads every member's ``GET /api/definitions`` (waiting,
bounded, until they agree or every member answered for ``settle_s``) and
``defs_check.check_definitions`` counts ``divergent`` and ``lost_changes``.
"""

from __future__ import annotations

import base64
import json
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pika
import pika.exceptions

from amqp_broker.core.access import hash_password

from .brokers import MANAGEMENT_PORT, PASSWORD, USER, Broker, Brokers
from .defs_check import (
    SAMPLE,
    DefinitionsResult,
    binding_key,
    check_definitions,
    divergent,
    keyed,
)
from .history import History
from .pika_clients import connection_parameters

__all__ = ["PREFIX", "DefinitionsClient", "DefinitionsWorkload", "read_definitions"]

PREFIX = "d."
QUEUES = tuple(f"d.q{k}" for k in range(4))
EXCHANGES = tuple(f"d.x{k}" for k in range(3))
USERS = ("d.u0", "d.u1")
POLICIES = ("d.p0", "d.p1")
#: family -> (weight, {kind: weight}): every client of a round changes the same family and names
FAMILIES: dict[str, tuple[int, dict[str, int]]] = {
    "queue": (6, {"declare_queue": 3, "delete_queue": 1}),
    "exchange": (4, {"declare_exchange": 3, "delete_exchange": 1}),
    "binding": (5, {"bind": 3, "unbind": 1, "delete_queue": 1, "delete_exchange": 1}),
    "user": (3, {"put_user": 3, "delete_user": 1}),
    "permission": (3, {"set_permission": 3, "clear_permission": 1, "delete_user": 1}),
    "policy": (2, {"set_policy": 3, "clear_policy": 1}),
}
HTTP_TIMEOUT = 5.0


class Refused(Exception):
    """The broker refused the change (AMQP Channel.Close, HTTP 4xx): it did not happen."""


class Unknown(Exception):
    """No clear answer (connection lost, timeout, HTTP 5xx): it may or may not have happened."""


def management(host: str, method: str, path: str, body: Any = None,
               timeout: float = HTTP_TIMEOUT) -> Any:
    """One management API call to the broker at ``host`` as the harness's administrator; the
    decoded JSON (None for an empty body). Raises ``Refused`` (4xx) and ``Unknown`` (5xx, no
    answer)."""
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    req = urllib.request.Request(
        f"http://{host}:{MANAGEMENT_PORT}/api{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Basic {auth}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = resp.read()
            return json.loads(data) if data else None
    except urllib.error.HTTPError as exc:
        if 400 <= exc.code < 500:
            raise Refused(f"{exc.code} {exc.read()[:200]!r}") from None
        raise Unknown(f"HTTP {exc.code}") from None
    except (OSError, ValueError) as exc:
        raise Unknown(str(exc)) from None


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


@dataclass
class Change:
    """One drawn change: history fields and the call that makes it (``amqp``: takes a pika
    channel; else HTTP)."""

    action: str
    key: str
    value: Any
    call: Callable[..., Any]
    amqp: bool


def draw(rng: random.Random, shared: random.Random, host: str) -> Change:
    """A random change (see the module docstring) against the broker at ``host``: the family
    and the names come from ``shared`` (the same for every client of a round, so that they
    conflict), the kind and the values from the client's own ``rng``."""
    family = shared.choices(list(FAMILIES), weights=[w for w, _ in FAMILIES.values()])[0]
    q, x, rk = shared.choice(QUEUES), shared.choice(EXCHANGES), shared.choice("ab")
    u, p = shared.choice(USERS), shared.choice(POLICIES)
    kinds = FAMILIES[family][1]
    kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
    if kind == "delete_queue":
        return Change("delete", f"queue:/:{q}", None, lambda ch: ch.queue_delete(q), True)
    if kind == "declare_queue":
        args = rng.choice([{}, {"x-max-length": 10}, {"x-max-length": 20}])
        return Change("put", f"queue:/:{q}", args, lambda ch: ch.queue_declare(
            q, durable=True, arguments=args or None), True)
    if kind == "delete_exchange":
        return Change("delete", f"exchange:/:{x}", None, lambda ch: ch.exchange_delete(x), True)
    if kind == "declare_exchange":
        t = "fanout" if rng.random() < 0.1 else "direct"
        return Change("put", f"exchange:/:{x}", {"type": t, "arguments": {}},
                      lambda ch: ch.exchange_declare(x, t, durable=True), True)
    if kind in ("bind", "unbind"):
        key = binding_key("/", x, "queue", q, rk)
        if kind == "unbind":
            return Change("delete", key, None, lambda ch: ch.queue_unbind(q, x, rk), True)
        return Change("put", key, {}, lambda ch: ch.queue_bind(q, x, rk), True)
    if kind == "delete_user":
        return Change("delete", f"user:{u}", None,
                      lambda: management(host, "DELETE", f"/users/{_q(u)}"), False)
    if kind == "put_user":
        pw_hash = hash_password(f"pw{rng.randrange(10**6)}")
        return Change("put", f"user:{u}", [pw_hash, []], lambda: management(
            host, "PUT", f"/users/{_q(u)}", {"password_hash": pw_hash, "tags": ""}), False)
    if kind in ("set_permission", "clear_permission"):
        path = f"/permissions/%2F/{_q(u)}"
        if kind == "clear_permission":
            return Change("delete", f"permission:/:{u}", None,
                          lambda: management(host, "DELETE", path), False)
        perm = {"configure": rng.choice([".*", "^d\\."]), "write": ".*", "read": ".*"}
        return Change("put", f"permission:/:{u}", [perm["configure"], ".*", ".*"],
                      lambda: management(host, "PUT", path, perm), False)
    path = f"/policies/%2F/{_q(p)}"
    if kind == "clear_policy":
        return Change("delete", f"policy:/:{p}", None,
                      lambda: management(host, "DELETE", path), False)
    policy = {"pattern": f"^{p}\\.", "definition": {"max-length": rng.choice([10, 20])},
              "priority": 0, "apply-to": "queues"}
    return Change("put", f"policy:/:{p}", policy, lambda: management(host, "PUT", path, policy),
                  False)


class Ticks:
    """Rounds every ``1 / rate`` s from a thread, until ``stop``: clients wait for the next
    round and act together (those not stuck in a change), on the names of that round."""

    def __init__(self, rate: float, seed: int, stop: threading.Event) -> None:
        self.period, self.seed, self.stop = 1.0 / rate, seed, stop
        self.round = 0
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="defs-ticks", daemon=True)

    def start(self) -> None:
        """Start ticking."""
        self._thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            with self._cond:
                self.round += 1
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def next_after(self, seen: int, timeout: float = 2.0) -> int:
        """The first round after ``seen`` (waits at most ``timeout`` s; ``seen`` again when
        stopped or timed out)."""
        with self._cond:
            self._cond.wait_for(lambda: self.round > seen or self.stop.is_set(), timeout)
            return self.round

    def shared(self, round_: int) -> random.Random:
        """The names' RNG of round ``round_`` (the same in every client)."""
        return random.Random(self.seed * 1_000_003 + round_)


class DefinitionsClient(threading.Thread):
    """Makes a random change (:func:`draw`) on one broker at each round of ``ticks``, until
    ``stop``; reconnects after a lost connection (after ``reconnect_delay`` s, at most
    ``max_connects`` times)."""

    def __init__(self, broker: Broker, history: History, seed: int, stop: threading.Event,
                 counter: Callable[[], int], ticks: Ticks, reconnect_delay: float = 0.5,
                 max_connects: int = 200) -> None:
        super().__init__(name=f"defs-{broker.name}", daemon=True)
        self.broker, self.history, self.stop_event = broker, history, stop
        self.rng = random.Random(seed)
        self.counter, self.ticks = counter, ticks
        self.reconnect_delay, self.max_connects = reconnect_delay, max_connects
        self._conn: Any = None
        self._channel: Any = None
        self._connects = 0

    def run(self) -> None:
        """Draw and make changes until ``stop`` (bounded by ``max_connects``)."""
        seen = 0
        try:
            while not self.stop_event.is_set() and self._connects <= self.max_connects:
                now = self.ticks.next_after(seen)
                if now == seen:
                    continue
                seen = now
                self._one(draw(self.rng, self.ticks.shared(now), self.broker.host))
        finally:
            self._close()

    def _channel_or_connect(self) -> Any:
        if self._conn is None or not self._conn.is_open:
            self._connects += 1
            self._conn = pika.BlockingConnection(connection_parameters(self.broker.url, 5))
            self._channel = None
        if self._channel is None or not self._channel.is_open:
            self._channel = self._conn.channel()
        return self._channel

    def _close(self) -> None:
        try:
            if self._conn is not None and self._conn.is_open:
                self._conn.close()
        except (pika.exceptions.AMQPError, OSError):
            pass
        self._conn = None

    def _one(self, change: Change) -> None:
        n = self.counter()
        fields = {"n": n, "client": self.name, "broker": self.broker.name}
        if change.amqp:
            try:
                channel = self._channel_or_connect()
            except (pika.exceptions.AMQPError, OSError):
                self._conn = None
                self.stop_event.wait(self.reconnect_delay)
                return          # not invoked
        self.history.record("define", type="invoke", action=change.action, key=change.key,
                            value=change.value, **fields)
        try:
            if change.amqp:
                change.call(channel)
            else:
                change.call()
            self.history.record("define", type="ok", **fields)
        except pika.exceptions.ChannelClosedByBroker as exc:
            self.history.record("define", type="fail", error=f"{exc.reply_code} "
                                f"{exc.reply_text}", **fields)
        except Refused as exc:
            self.history.record("define", type="fail", error=str(exc), **fields)
        except (Unknown, pika.exceptions.AMQPError, OSError) as exc:
            self.history.record("define", type="info", error=repr(exc)[:200], **fields)
            if change.amqp:
                self._close()
                self.stop_event.wait(self.reconnect_delay)


@dataclass
class DefinitionsWorkload:
    """One :class:`DefinitionsClient` per broker, acting in rounds (:class:`Ticks`, ``rate``
    per second); ``start()``, ``stop(timeout)``, ``check()``."""

    brokers: Brokers
    history: History
    seed: int
    rate: float = 10.0
    stop_event: threading.Event = field(default_factory=threading.Event)
    clients: list[DefinitionsClient] = field(default_factory=list)
    _n: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _next(self) -> int:
        with self._lock:
            self._n += 1
            return self._n

    def start(self) -> None:
        """Start one client per broker (seeds ``seed * 100 + index``) and the rounds."""
        ticks = Ticks(self.rate, self.seed, self.stop_event)
        for b in self.brokers.brokers:
            c = DefinitionsClient(b, self.history, self.seed * 100 + b.index, self.stop_event,
                                  self._next, ticks)
            self.clients.append(c)
            c.start()
        ticks.start()

    def stop(self, timeout: float = 15.0) -> None:
        """Tell the clients to stop and wait at most ``timeout`` s for all (an unanswered
        change stays unknown)."""
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for c in self.clients:
            c.join(max(0.0, deadline - time.monotonic()))

    def check(self, settle_s: float = 10.0) -> DefinitionsResult:
        """Read every broker's definitions (:func:`read_definitions`) and count the history."""
        per_member, unread = read_definitions(self.brokers, settle_s)
        names = divergent(per_member)
        self.history.record("phase", phase="definitions", unread=unread, divergent=names,
                            values={n: {m: d.get(n) for m, d in per_member.items()}
                                    for n in names[:SAMPLE]})
        return check_definitions(self.history.events(), per_member, unread)


def read_definitions(brokers: Brokers, settle_s: float = 10.0, prefix: str = PREFIX,
                     ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every broker's ``GET /api/definitions``, :func:`defs_check.keyed` by ``prefix``, read
    again every 0.5 s until all answer and agree, or ``settle_s`` s pass (a change still on its
    way is not counted as a divergence; one that never arrives is). Returns ``(per member,
    names of members that did not answer)``."""
    deadline = time.monotonic() + settle_s
    while True:
        per_member: dict[str, dict[str, Any]] = {}
        unread = []
        for b in brokers.brokers:
            try:
                data = management(b.host, "GET", "/definitions")
                if not isinstance(data, dict):
                    raise TypeError("not a definitions document")
                per_member[b.name] = keyed(data, prefix)
            except (Refused, Unknown, KeyError, TypeError):
                unread.append(b.name)
        if (not unread and not divergent(per_member)) or time.monotonic() >= deadline:
            return per_member, unread
        time.sleep(0.5)
