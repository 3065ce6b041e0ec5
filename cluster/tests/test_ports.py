"""The ports: declarations travel as ordinary AMQP methods; the Protocols are checkable."""

from __future__ import annotations

from collections.abc import Iterable

from pamqp import commands

from amqp_broker.protocol.methods import decode_method, encode_method
from cluster import ports


def _round_trip(method):
    return decode_method(encode_method(1, method)[7:-1])


def test_declarations_become_amqp_methods() -> None:
    ex = ports.ExchangeDecl("/", "logs", "topic", durable=True, arguments={"alternate-exchange": "ae"})
    back = _round_trip(ex.to_method())
    assert isinstance(back, commands.Exchange.Declare)
    assert (back.exchange, back.exchange_type, back.durable) == ("logs", "topic", True)
    private = ports.QueueDecl("/", "amq.gen-1", home="node-b")
    back = _round_trip(private.to_method())
    assert isinstance(back, commands.Queue.Declare) and not back.exclusive
    assert back.arguments == {ports.HOME_ARGUMENT: "node-b"} and not private.shared
    assert ports.QueueDecl("/", "jobs").shared
    qb = _round_trip(ports.BindingDecl("/", "logs", "jobs", "a.*").to_method())
    assert isinstance(qb, commands.Queue.Bind) and (qb.exchange, qb.queue) == ("logs", "jobs")
    eb = _round_trip(ports.BindingDecl("/", "logs", "audit", "#", to_exchange=True).to_method())
    assert isinstance(eb, commands.Exchange.Bind) and eb.destination == "audit"


class _FakeBroker:
    def exchanges(self) -> Iterable[ports.ExchangeDecl]:
        return []

    def queues(self, shared: bool) -> Iterable[ports.QueueDecl]:
        return []

    def bindings(self, shared: bool) -> Iterable[ports.BindingDecl]:
        return []

    def consumer_counts(self) -> Iterable[ports.ConsumerCount]:
        return []

    def apply(self, change: ports.Change, origin: str) -> None:
        pass

    def deliver_relayed(self, message: ports.RelayedMessage) -> bool:
        return False

    def load(self) -> dict[str, int]:
        return {}

    def accept_clients(self, enabled: bool) -> None:
        pass

    def serve_mirrored(self, enabled: bool) -> None:
        pass

    def drop_replicated_state(self) -> None:
        pass


def test_protocols_are_runtime_checkable() -> None:
    assert isinstance(_FakeBroker(), ports.BrokerPort)
    assert not isinstance(object(), ports.BrokerPort)
    assert not isinstance(_FakeBroker(), ports.PeerLinks)
