"""Two clients changing the same names on two members at one moment (issue 23's process tests).

``Trio``: three real brokers with their management APIs (``start_with_api``), one cluster for a
whole test module. ``at_once(*steps)``: each step runs in its own thread, connected first (an
AMQP channel on its member, or nothing for an HTTP call), then every thread waits at one
``threading.Barrier`` and acts; returns what each got: ``"ok"`` or the reply code (AMQP
Channel.Close code, or HTTP status >= 400), with the text. ``flush(trio)``: a marker queue
declared on each member, then a bounded wait until every member holds every marker: a member's
changes reach the others in order (today: the per-sender FIFO of the peer links; with the
metadata log: log order), so after it every change made before is applied everywhere (or
refused for good). ``definitions(trio)``: each member's ``GET /api/definitions``, flattened by
:func:`interop_tests.faults.defs_check.keyed`. Network: 127.0.0.0/8 only.
"""

from __future__ import annotations

import base64
import functools
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions

from cluster.tests.processes import Cluster, Member, api_get, start_with_api, wait_for
from interop_tests.faults.defs_check import keyed

__all__ = ["Answer", "Step", "Trio", "amqp_step", "at_once", "flush", "http", "http_step",
           "login", "quote"]

Answer = tuple[Any, str]   # ("ok" | reply code / HTTP status, text)
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()


def quote(name: str) -> str:
    """A vhost or name as one URL path segment (``/`` is ``%2F``)."""
    return urllib.parse.quote(name, safe="")


@dataclass
class Trio:
    """Three brokers in one view, each with its management API URL."""

    cluster: Cluster
    members: list[Member]
    urls: list[str]

    @classmethod
    def start(cls, cluster: Cluster) -> Trio:
        """n2 founds, n3 and n4 join it; waits (bounded) for one agreed view of the three."""
        n2, u2 = start_with_api(cluster, 2, None)
        n3, u3 = start_with_api(cluster, 3, n2)
        n4, u4 = start_with_api(cluster, 4, n2)
        view = [n2.address, n3.address, n4.address]
        wait_for(lambda: all(m.members() == view for m in (n2, n3, n4)), 20,
                 "the three brokers did not agree on one view")
        return cls(cluster, [n2, n3, n4], [u2, u3, u4])

    def definitions(self, prefix: str) -> dict[str, dict[str, Any]]:
        """``{member name: keyed definitions}`` of the names starting with ``prefix``; a member
        whose API does not answer maps to ``{"unreadable": ...}`` (so it differs)."""
        out = {}
        for m, url in zip(self.members, self.urls, strict=True):
            defs = api_get(url, "/definitions")
            out[m.name] = keyed(defs, prefix) if isinstance(defs, dict) else \
                {"unreadable": m.name}
        return out


def http(url: str, method: str, path: str, body: Any = None,
         user: tuple[str, str] = ("guest", "guest")) -> Answer:
    """One management API call (``path`` below ``/api``): ``("ok", "")`` for a 2xx, else
    ``(status, body text)``; ``(0, reason)`` when the API does not answer."""
    auth = "Basic " + base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + "/api" + path, data=data, method=method,
                                 headers={"Authorization": auth,
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10):
            return "ok", ""
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


class Step:
    """One client's part in :func:`at_once`: ``prepare()`` before the barrier, ``act()`` after
    it (returns an :data:`Answer`), ``close()`` at the end."""

    def prepare(self) -> None:
        """Connect (nothing by default)."""

    def act(self) -> Answer:
        """The change."""
        raise NotImplementedError

    def close(self) -> None:
        """Disconnect (nothing by default)."""


class _AmqpStep(Step):
    def __init__(self, member: Member, action: Callable[[Any], Any], vhost: str = "/") -> None:
        self.member, self.action, self.vhost = member, action, vhost
        self.conn: pika.BlockingConnection | None = None

    def prepare(self) -> None:
        params = pika.URLParameters(f"amqp://guest:guest@{self.member.address}/{quote(self.vhost)}")
        self.conn = pika.BlockingConnection(params)
        self.channel = self.conn.channel()

    def act(self) -> Answer:
        try:
            self.action(self.channel)
            return "ok", ""
        except pika.exceptions.ChannelClosedByBroker as exc:
            return exc.reply_code, exc.reply_text
        except pika.exceptions.ConnectionClosedByBroker as exc:
            return exc.reply_code, exc.reply_text

    def close(self) -> None:
        try:
            if self.conn is not None and self.conn.is_open:
                self.conn.close()
        except pika.exceptions.AMQPError:   # the broker closed it first (a deleted vhost: 320)
            pass


class _HttpStep(Step):
    def __init__(self, url: str, method: str, path: str, body: Any = None) -> None:
        self.args = (url, method, path, body)

    def act(self) -> Answer:
        return http(*self.args)


def amqp_step(member: Member, action: Callable[[Any], Any], vhost: str = "/") -> Step:
    """A step that runs ``action(channel)`` on a pika channel to ``member`` (vhost ``vhost``)."""
    return _AmqpStep(member, action, vhost)


def http_step(url: str, method: str, path: str, body: Any = None) -> Step:
    """A step that makes one management API call (:func:`http`)."""
    return _HttpStep(url, method, path, body)


def at_once(*steps: Step, timeout: float = 30.0) -> list[Answer]:
    """Run the steps' ``act`` at one moment (threads + a barrier; see the module docstring).
    Raises ``AssertionError`` when a step could not prepare or a thread did not end within
    ``timeout`` s."""
    barrier = threading.Barrier(len(steps), timeout=timeout)
    answers: list[Answer | None] = [None] * len(steps)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        step = steps[k]
        try:
            step.prepare()
            barrier.wait()
            answers[k] = step.act()
        except BaseException as exc:   # reported below
            errors.append(exc)
            barrier.abort()
        finally:
            step.close()

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(len(steps))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not errors, errors
    assert all(a is not None for a in answers), "a step did not answer"
    return [a for a in answers if a is not None]


def flush(trio: Trio, timeout: float = 20.0) -> None:
    """See the module docstring (the markers are deleted afterwards)."""
    token = uuid.uuid4().hex[:8]
    names = [f"flush.{token}.{m.name}" for m in trio.members]
    for m, name in zip(trio.members, names, strict=True):
        conn = m.connect()
        conn.channel().queue_declare(name)
        conn.close()

    def holds_all(m: Member) -> bool:
        conn = m.connect()
        try:
            for name in names:
                try:
                    conn.channel().queue_declare(name, passive=True)
                except pika.exceptions.ChannelClosedByBroker:
                    return False
            return True
        finally:
            if conn.is_open:
                conn.close()

    for m in trio.members:
        wait_for(functools.partial(holds_all, m), timeout, f"{m.name} did not get every marker",
                 interval=0.1)
    conn = trio.members[0].connect()
    for name in names:
        conn.channel().queue_delete(name)
    conn.close()


def login(member: Member, user: str, password: str, vhost: str = "/") -> bool:
    """True when ``user``/``password`` opens a connection to ``vhost`` on ``member``."""
    url = f"amqp://{quote(user)}:{quote(password)}@{member.address}/{quote(vhost)}"
    try:
        pika.BlockingConnection(pika.URLParameters(url + "?connection_attempts=1")).close()
        return True
    except (pika.exceptions.AMQPError, OSError):
        return False
