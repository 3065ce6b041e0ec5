"""``MetadataMachine`` against RabbitMQ itself: the same command sequences sent with pika to a real
RabbitMQ 3.10 node (``interop_tests.rabbitmq_node``: the private node the differential tests
share, skipped when rabbitmq-server is not installed) get, one by one, the answer the machine
decides: Ok, or the same reply code and reply text (channel or connection close).

The sequences are the issue 23 conflicts played in one committed order (two declares of a queue
with different x-max-length; a bind after the exchange's delete) and the refusals a cluster
member must reproduce: inequivalent redeclares, reserved names, another connection's exclusive
queue, invalid arguments of classic, stream and quorum queues, the headers exchange's x-match,
Exchange.Delete if-unused, and the idempotent deletes and unbinds. Names carry a random prefix
(the node is shared by the test process) and are deleted afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pika
import pika.exceptions
import pytest

from cluster.metadata import commands as m
from cluster.metadata.machine import MetadataMachine
from cluster.metadata.outcomes import Refused
from interop_tests.rabbitmq_node import RabbitMQUnavailable, rabbitmq_uri

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]

Scenario = Callable[[str], list[m.Command]]


def _conflicts(p: str) -> list[m.Command]:
    q, x = p + "q", p + "x"
    return [m.DeclareQueue("/", q, arguments={"x-max-length": 10}, connection="a"),
            m.DeclareQueue("/", q, arguments={"x-max-length": 20}, connection="b"),
            m.DeclareExchange("/", x, "fanout"), m.DeleteExchange("/", x),
            m.Bind("/", x, q, connection="b"), m.DeleteQueue("/", q)]


def _exchanges(p: str) -> list[m.Command]:
    x, y = p + "x", p + "y"
    return [m.DeclareExchange("/", x, "direct"), m.DeclareExchange("/", x, "fanout"),
            m.DeclareExchange("/", x, "direct", durable=True),
            m.DeclareExchange("/", x, "direct", auto_delete=True),
            m.DeclareExchange("/", "amq." + x, "direct"), m.DeleteExchange("/", "amq.direct"),
            m.DeclareExchange("/", y, "fanout"), m.Bind("/", x, y, m.EXCHANGE, "k"),
            m.DeleteExchange("/", x, if_unused=True), m.Unbind("/", x, y, m.EXCHANGE, "k"),
            m.DeleteExchange("/", x, if_unused=True), m.DeleteExchange("/", x),
            m.DeleteExchange("/", y), m.Unbind("/", x, y, m.EXCHANGE, "k")]


def _queues(p: str) -> list[m.Command]:
    q, s, qq = p + "q", p + "s", p + "qq"
    return [m.DeclareQueue("/", "amq." + q), m.DeclareQueue("/", q, arguments={
                "x-message-ttl": -1}),
            m.DeclareQueue("/", q, durable=True), m.DeclareQueue("/", q),
            m.DeclareQueue("/", q, durable=True, auto_delete=True),
            m.DeclareQueue("/", s, arguments={"x-queue-type": "stream"}),
            m.DeclareQueue("/", qq, True, arguments={"x-queue-type": "quorum",
                                                     "x-max-priority": 5}),
            m.DeleteQueue("/", q), m.DeleteQueue("/", q)]


def _exclusive(p: str) -> list[m.Command]:
    q = p + "mine"
    return [m.DeclareQueue("/", q, exclusive=True, connection="a"),
            m.DeclareQueue("/", q, exclusive=True, connection="b"),
            m.Bind("/", "amq.direct", q, connection="b"),
            m.DeleteQueue("/", q, connection="b"),
            m.DeclareQueue("/", q, exclusive=True, connection="a"),
            m.DeleteQueue("/", q, connection="a")]


def _bindings(p: str) -> list[m.Command]:
    q, h = p + "q", p + "h"
    return [m.DeclareQueue("/", q), m.DeclareExchange("/", h, "headers"),
            m.Bind("/", h, q, arguments={"x-match": "bad"}),
            m.Bind("/", h, q, arguments={"x-match": "any", "a": 1}),
            m.Bind("/", "", q, routing_key=q), m.Bind("/", p + "none", q),
            m.Bind("/", h, p + "none"), m.Unbind("/", p + "none", q),
            m.Unbind("/", h, q, arguments={"x-match": "any", "a": 1}),
            m.DeleteExchange("/", h), m.DeleteQueue("/", q)]


def _unknown_type(p: str) -> list[m.Command]:
    return [m.DeclareExchange("/", p + "x", "nonsense")]


SCENARIOS: dict[str, Scenario] = {
    "issue 23 conflicts in one order": _conflicts, "exchanges": _exchanges, "queues": _queues,
    "exclusive queues": _exclusive, "bindings": _bindings,
    "unknown exchange type": _unknown_type,
}


class RabbitClients:
    """Two pika connections (``a`` and ``b``) to RabbitMQ, each with one channel, reopened after
    a close; ``run`` sends a command's method and returns ``("ok",)`` or the close's code and
    text."""

    def __init__(self, uri: str) -> None:
        self.params = pika.URLParameters(uri)
        self.conns: dict[str, Any] = {}
        self.channels: dict[str, Any] = {}

    def channel(self, who: str) -> Any:
        conn = self.conns.get(who)
        if conn is None or conn.is_closed:
            conn = self.conns[who] = pika.BlockingConnection(self.params)
            self.channels.pop(who, None)
        ch = self.channels.get(who)
        if ch is None or ch.is_closed:
            ch = self.channels[who] = conn.channel()
        return ch

    def run(self, cmd: m.Command) -> tuple[Any, ...]:
        ch = self.channel(getattr(cmd, "connection", "") or "a")
        try:
            _send(ch, cmd)
        except pika.exceptions.ChannelClosedByBroker as exc:
            return (exc.reply_code, exc.reply_text, False)
        except pika.exceptions.ConnectionClosedByBroker as exc:
            return (exc.reply_code, exc.reply_text, True)
        return ("ok",)

    def close(self) -> None:
        for conn in self.conns.values():
            if conn.is_open:
                conn.close()


def _send(ch: Any, cmd: m.Command) -> None:
    """The pika call of ``cmd``."""
    if isinstance(cmd, m.DeclareExchange):
        ch.exchange_declare(cmd.name, cmd.type, durable=cmd.durable, auto_delete=cmd.auto_delete,
                            internal=cmd.internal, arguments=dict(cmd.arguments))
    elif isinstance(cmd, m.DeleteExchange):
        ch.exchange_delete(cmd.name, if_unused=cmd.if_unused)
    elif isinstance(cmd, m.DeclareQueue):
        ch.queue_declare(cmd.name, durable=cmd.durable, exclusive=cmd.exclusive,
                         auto_delete=cmd.auto_delete, arguments=dict(cmd.arguments))
    elif isinstance(cmd, m.DeleteQueue):
        ch.queue_delete(cmd.name)
    elif isinstance(cmd, m.Bind | m.Unbind):
        args = dict(cmd.arguments)
        if cmd.destination_kind == m.EXCHANGE:
            call = ch.exchange_bind if isinstance(cmd, m.Bind) else ch.exchange_unbind
            call(cmd.destination, cmd.source, cmd.routing_key, arguments=args)
        else:
            call = ch.queue_bind if isinstance(cmd, m.Bind) else ch.queue_unbind
            call(cmd.destination, cmd.source, cmd.routing_key, arguments=args)
    else:
        raise AssertionError(f"no AMQP method for {cmd}")


@pytest.fixture(scope="module")
def rabbit() -> Iterator[RabbitClients]:
    try:
        uri = rabbitmq_uri()
    except RabbitMQUnavailable as exc:
        pytest.skip(str(exc))
    clients = RabbitClients(uri)
    yield clients
    clients.close()


def _cleanup(rabbit: RabbitClients, commands: list[m.Command]) -> None:
    for cmd in commands:
        if isinstance(cmd, m.DeclareQueue):
            rabbit.run(m.DeleteQueue("/", cmd.name, cmd.connection))
        elif isinstance(cmd, m.DeclareExchange) and cmd.name and not cmd.name.startswith("amq."):
            rabbit.run(m.DeleteExchange("/", cmd.name))


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_machine_answers_as_rabbitmq(rabbit: RabbitClients, name: str) -> None:
    commands = SCENARIOS[name](f"it.md.{uuid.uuid4().hex[:8]}.")
    machine = MetadataMachine()
    machine.configure(("rabbit@localhost",))
    machine.apply(1, m.AddVhost("/"))
    try:
        for index, cmd in enumerate(commands, start=2):
            outcome = machine.apply(index, cmd)
            mine = ((outcome.code, outcome.text, outcome.connection_level)
                    if isinstance(outcome, Refused) else ("ok",))
            assert mine == rabbit.run(cmd), cmd
    finally:
        _cleanup(rabbit, commands)
