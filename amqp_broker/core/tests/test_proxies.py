"""Proxies of other members' private queues (core.proxies): routing to proxies relays each message
once per home node, however many proxies of that home it matches; the home keeps the relayed
message for its private queues only. Source: Qpid ClusteringHA proposal, "Private queues"."""

from __future__ import annotations

from pamqp import commands as cmd

from amqp_broker.core import proxies
from amqp_broker.core.broker import Broker
from amqp_broker.core.tests.client import Client
from amqp_broker.protocol.errors import ChannelException
from queues.message import Message
from routing.destination import Destination


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, bytes]] = []

    def can_relay(self, node: str) -> bool:
        return True

    def relay(self, node: str, vhost: str, queue: str, message: Message) -> None:
        self.sent.append((node, vhost, queue, message.body))


def _setup():
    broker = Broker()
    sink = Sink()
    broker.relay_sink = sink
    vhost = broker.vhosts["/"]
    vhost.declare_exchange("ev", "topic")
    for name, home in (("p1", "A"), ("p2", "A"), ("p3", "B")):
        proxies.add_proxy(vhost, name, home)
        vhost.bind("ev", Destination("queue", name), "a.#", None)
    return broker, vhost, sink


def test_a_message_matching_several_proxies_of_one_home_is_relayed_once_per_home():
    broker, vhost, sink = _setup()
    msg = Message.build("ev", "a.b", b"hello", cmd.Basic.Properties())
    vhost.enqueue(msg, vhost.route(msg))
    assert sorted(s[0] for s in sink.sent) == ["A", "B"]
    assert all(s[2] == "" and s[3] == b"hello" for s in sink.sent)


def test_home_leaving_drops_its_proxies_and_their_bindings():
    broker, vhost, sink = _setup()
    proxies.remove_home(vhost, "A")
    msg = Message.build("ev", "a.b", b"x", cmd.Basic.Properties())
    assert vhost.route(msg) == {"p3"}


def test_proxy_name_is_locked_for_local_clients():
    broker, vhost, sink = _setup()
    try:
        vhost.get_queue("p1")
    except ChannelException as exc:
        assert exc.reply_code == 405
    else:
        raise AssertionError("a proxy must not be usable as a local queue")


def test_relayed_message_goes_to_private_queues_only():
    broker = Broker()
    vhost = broker.vhosts["/"]
    client = Client(broker)
    client.handshake()
    owner = client.conn

    vhost.declare_exchange("ev", "fanout")
    private = vhost.declare_queue("mine", owner, exclusive=True)
    shared = vhost.declare_queue("shared", owner)
    for q in (private, shared):
        vhost.bind("ev", Destination("queue", q.name), "", None)
    proxies.route_private(vhost, Message.build("ev", "k", b"m", cmd.Basic.Properties()))
    assert private.message_count == 1 and shared.message_count == 0
