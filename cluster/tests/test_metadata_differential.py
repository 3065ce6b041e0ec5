"""``MetadataMachine`` against one real broker: the same random command sequences, the same answers.

The broker is the sans-IO core (``amqp_broker.core.Broker``) driven over the wire by two AMQP
clients (``amqp_broker.core.tests.client``: real frames, pamqp-encoded), and through
``access_store`` / ``policy_store`` for vhosts, users, permissions and policies, with the checks
the management API makes before them. Hypothesis draws sequences of declares, deletes, binds and
unbinds (queue and exchange-to-exchange, exclusive queues of either connection, arguments valid,
invalid and inequivalent, reserved names), policies that validate or not and re-apply to
existing queues, vhosts, users and permissions. After every command the broker's answer
(Ok, or the Channel.Close code and text) must equal the machine's outcome, and at the end the
broker's exchanges, bindings, queues (with their arguments), policies, vhosts, users and
permissions must be the machine's.

Left out, on purpose (a single broker without a cluster does not serve them; unit tests cover
them): quorum queues and ``ha-mode`` (need a cluster), streams (their logs need a directory),
the 503 of an unknown exchange type (it closes the connection, whose exclusive queues then go).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands as pc

from amqp_broker.core import access_store, policy_store
from amqp_broker.core.access import Account, Grant
from amqp_broker.core.broker import Broker
from amqp_broker.core.policies import PolicyError, make_policy
from amqp_broker.core.settings import BrokerSettings, User
from amqp_broker.core.tests.client import Client
from amqp_broker.definitions.codec import encode_table
from cluster.metadata import commands as m
from cluster.metadata.machine import MetadataMachine
from cluster.metadata.outcomes import Bound, Declared, Deleted, Refused, Stored

CONNECTIONS = ("c0", "c1")
# the names and arguments that usually succeed come up more often than the others
queue_names = st.sampled_from(["q0", "q0", "q1", "q1", "amq.q", "amq.gen-1"])
exchange_names = st.sampled_from(["x0", "x0", "x1", "amq.direct", "amq.x", ""])
queue_args = st.one_of(
    st.just({}), st.fixed_dictionaries({"x-max-length": st.sampled_from([10, 20])}),
    st.dictionaries(
        st.sampled_from(["x-max-length", "x-message-ttl", "x-overflow", "x-dead-letter-exchange",
                         "x-dead-letter-routing-key", "x-max-priority", "x-queue-type"]),
        st.sampled_from([10, 20, -1, "reject-publish", "drop-head", "bad", "dlx", "classic",
                         True]),
        max_size=2))
binding_args = st.sampled_from([{}, {}, {"x-match": "any"}, {"x-match": "all"},
                                {"x-match": "bad"}])
connections = st.sampled_from(CONNECTIONS)

amqp_commands = st.one_of(
    st.builds(m.DeclareExchange, st.just("/"), exchange_names,
              st.sampled_from(["direct", "fanout", "topic", "headers"]), st.booleans(),
              st.booleans(), st.booleans(),
              st.sampled_from([{}, {"alternate-exchange": "x1"}, {"alternate-exchange": 5}])),
    st.builds(m.DeleteExchange, st.just("/"), exchange_names, st.booleans()),
    st.builds(m.DeclareQueue, st.just("/"), queue_names, st.booleans(), st.booleans(),
              st.booleans(), queue_args, connections),
    st.builds(m.DeleteQueue, st.just("/"), queue_names, connections),
    *(st.builds(cls, st.just("/"), exchange_names, queue_names, st.just(m.QUEUE),
                st.sampled_from(["", "a", "a.*"]), binding_args, connections)
      for cls in (m.Bind, m.Unbind)),
    *(st.builds(cls, st.just("/"), exchange_names, exchange_names, st.just(m.EXCHANGE),
                st.sampled_from(["", "a"]), binding_args)
      for cls in (m.Bind, m.Unbind)),
)
vhosts = st.sampled_from(["/", "/", "v1"])
users = st.sampled_from(["guest", "u1"])
management_commands = st.one_of(
    st.builds(m.SetPolicy, vhosts, st.sampled_from(["p0", "p1"]),
              st.sampled_from(["^q", "q1", "("]),
              st.sampled_from([{"max-length": 5}, {"message-ttl": 100},
                               {"overflow": "reject-publish"}, {"dead-letter-routing-key": "k"},
                               {"bogus": 1}]),
              st.integers(0, 2), st.sampled_from(["queues", "classic_queues", "exchanges"])),
    st.builds(m.ClearPolicy, vhosts, st.sampled_from(["p0", "p1"])),
    st.builds(m.AddVhost, st.just("v1"), st.sampled_from(["", "d"]), st.just(()), users),
    st.builds(m.DeleteVhost, st.just("v1")),
    st.builds(m.PutUser, users, st.sampled_from(["h1", "h2"]), st.just("alg"),
              st.sampled_from([(), ("administrator",)])),
    st.builds(m.DeleteUser, st.just("u1")),
    # guest's own permissions stay: the broker checks them (the machine leaves that to members)
    st.builds(m.SetPermission, st.just("u1"), vhosts, st.sampled_from([".*", "^q"])),
    st.builds(m.ClearPermission, st.just("u1"), vhosts),
)


MANAGEMENT = (m.SetPolicy, m.ClearPolicy, m.AddVhost, m.DeleteVhost, m.PutUser, m.DeleteUser,
              m.SetPermission, m.ClearPermission)


class SingleBroker:
    """One broker, two client connections (``c0``, ``c1``) with channel 1 open, on "/"."""

    def __init__(self) -> None:
        self.broker = Broker(BrokerSettings(vhosts=("/",), users=(
            User("guest", "guest", ("*",), loopback_only=True),)), clock=lambda: 1000.0)
        self.clients: dict[str, Client] = {}
        for i, name in enumerate(CONNECTIONS):
            cl = Client(self.broker, "127.0.0.1", 50000 + i)
            cl.handshake()
            cl.open_channel(1)
            self.clients[name] = cl

    def run(self, cmd: m.Command) -> tuple[Any, ...]:
        """Apply ``cmd`` the way a client or the management API would; its normalised answer."""
        if isinstance(cmd, MANAGEMENT):
            return self._management(cmd)
        return self._amqp(self.clients[getattr(cmd, "connection", "") or "c0"], _method(cmd))

    @staticmethod
    def _amqp(cl: Client, method: Any) -> tuple[Any, ...]:
        cl.send(1, method)
        reply = cl.expect(object, 1)
        if isinstance(reply, pc.Channel.Close):
            cl.send(1, pc.Channel.CloseOk())
            cl.open_channel(1)
            return ("refused", reply.reply_code, reply.reply_text)
        assert type(reply).__name__ == type(method).__name__ + "Ok", reply
        return ("ok",)

    def _management(self, cmd: m.Command) -> tuple[Any, ...]:
        b = self.broker
        if isinstance(cmd, m.SetPolicy):   # the management API's PUT: 404, 400, 201/204
            if cmd.vhost not in b.vhosts:
                return ("refused",)
            try:
                policy = make_policy(cmd.vhost, cmd.name, {
                    "pattern": cmd.pattern, "definition": dict(cmd.definition),
                    "priority": cmd.priority, "apply-to": cmd.apply_to})
            except PolicyError:
                return ("refused",)
            return ("stored", not policy_store.set_policy(b, policy))
        if isinstance(cmd, m.ClearPolicy):
            return ("deleted", policy_store.clear_policy(b, cmd.vhost, cmd.name))
        if isinstance(cmd, m.AddVhost):
            return ("stored", access_store.add_vhost(b, cmd.name, cmd.description, cmd.tags,
                                                     cmd.creator))
        if isinstance(cmd, m.DeleteVhost):
            return ("deleted", access_store.delete_vhost(b, cmd.name))
        if isinstance(cmd, m.PutUser):
            new = cmd.name not in b.access.users
            access_store.save_user(b, Account(cmd.name, cmd.password_hash,
                                              cmd.hashing_algorithm, cmd.tags))
            return ("stored", new)
        if isinstance(cmd, m.DeleteUser):
            return ("deleted", access_store.delete_user(b, cmd.name))
        if isinstance(cmd, m.SetPermission):
            if cmd.vhost not in b.vhosts or cmd.user not in b.access.users:
                return ("refused",)   # 400 vhost_or_user_not_found
            new = (cmd.user, cmd.vhost) not in b.access.permissions
            access_store.save_permission(b, cmd.user, cmd.vhost, Grant(cmd.configure, cmd.write, cmd.read))
            return ("stored", new)
        assert isinstance(cmd, m.ClearPermission)
        return ("deleted", access_store.delete_permission(b, cmd.user, cmd.vhost))

    def definitions(self) -> dict[str, Any]:
        """Everything the machine must hold too, in comparable shapes."""
        b = self.broker
        vh = b.vhosts["/"]
        return {
            "vhosts": {n: b.vhost_meta.get(n, ("", ())) for n in b.vhosts},
            "users": {n: (a.password_hash, a.hashing_algorithm, tuple(a.tags))
                      for n, a in b.access.users.items()},
            "permissions": dict(b.access.permissions),
            "policies": [p.to_json() for p in b.policies.list()],
            "exchanges": _exchanges(vh.routing), "bindings": _bindings(vh.routing),
            "queues": {n: (q.durable, q.auto_delete, q.exclusive_owner is not None,
                           dict(q.arguments or {})) for n, q in vh.queues.items()},
        }


def _method(cmd: m.Command) -> Any:
    """The AMQP method a client sends for ``cmd``."""
    if isinstance(cmd, m.DeclareExchange):
        return pc.Exchange.Declare(exchange=cmd.name, exchange_type=cmd.type, durable=cmd.durable,
                                   auto_delete=cmd.auto_delete, internal=cmd.internal,
                                   arguments=dict(cmd.arguments))
    if isinstance(cmd, m.DeleteExchange):
        return pc.Exchange.Delete(exchange=cmd.name, if_unused=cmd.if_unused)
    if isinstance(cmd, m.DeclareQueue):
        return pc.Queue.Declare(queue=cmd.name, durable=cmd.durable, exclusive=cmd.exclusive,
                                auto_delete=cmd.auto_delete, arguments=dict(cmd.arguments))
    if isinstance(cmd, m.DeleteQueue):
        return pc.Queue.Delete(queue=cmd.name)
    assert isinstance(cmd, m.Bind | m.Unbind)
    args = dict(cmd.arguments)
    if cmd.destination_kind == m.EXCHANGE:
        cls = pc.Exchange.Bind if isinstance(cmd, m.Bind) else pc.Exchange.Unbind
        return cls(destination=cmd.destination, source=cmd.source, routing_key=cmd.routing_key,
                   arguments=args)
    cls = pc.Queue.Bind if isinstance(cmd, m.Bind) else pc.Queue.Unbind
    return cls(queue=cmd.destination, exchange=cmd.source, routing_key=cmd.routing_key,
               arguments=args)


def _exchanges(routing: Any) -> dict[str, tuple[Any, ...]]:
    return {x.name: (x.type, x.durable, x.auto_delete, x.internal, encode_table(x.arguments))
            for x in routing.exchanges()}


def _bindings(routing: Any) -> set[tuple[str, str, str, str, bytes]]:
    return {(b.source, b.destination.kind, b.destination.name, b.binding_key,
             encode_table(dict(b.arguments))) for b in routing.bindings()}


def normalise(cmd: m.Command, outcome: Any) -> tuple[Any, ...]:
    """The machine's outcome in ``SingleBroker.run``'s shapes (a management refusal is its HTTP
    layer's: no AMQP code to compare)."""
    if isinstance(outcome, Refused):
        return ("refused",) if isinstance(cmd, MANAGEMENT) else \
            ("refused", outcome.code, outcome.text)
    if not isinstance(cmd, MANAGEMENT):
        assert isinstance(outcome, Declared | Bound | Deleted), outcome
        return ("ok",)
    if isinstance(outcome, Stored):
        return ("stored", outcome.created)
    assert isinstance(outcome, Deleted)
    return ("deleted", outcome.existed)


def machine_definitions(mm: MetadataMachine) -> dict[str, Any]:
    s = mm.state
    vh = s.vhosts["/"]
    return {
        "vhosts": {n: (v.description, v.tags) for n, v in s.vhosts.items()},
        "users": {n: (a.password_hash, a.hashing_algorithm, tuple(a.tags))
                  for n, a in s.users.items()},
        "permissions": dict(s.permissions),
        "policies": [p.to_json() for p in s.policies.list()],
        "exchanges": _exchanges(vh.routing), "bindings": _bindings(vh.routing),
        "queues": {n: (q.durable, q.auto_delete, q.exclusive, q.arguments)
                   for n, q in vh.queues.items()},
    }


def seeded_machine(single: SingleBroker) -> MetadataMachine:
    """A machine holding what the broker starts with (its vhost, users and permissions)."""
    mm = MetadataMachine()
    b = single.broker
    for n in b.vhosts:
        mm.apply(0, m.AddVhost(n))
    for a in b.access.users.values():
        mm.apply(0, m.PutUser(a.name, a.password_hash, a.hashing_algorithm, tuple(a.tags)))
    for (user, vhost), g in b.access.permissions.items():
        mm.apply(0, m.SetPermission(user, vhost, g.configure, g.write, g.read))
    return mm


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(amqp_commands, amqp_commands, management_commands), max_size=25))
def test_machine_answers_and_holds_what_one_broker_does(commands: list[m.Command]) -> None:
    single = SingleBroker()
    mm = seeded_machine(single)
    for index, cmd in enumerate(commands, start=1):
        assert normalise(cmd, mm.apply(index, cmd)) == single.run(cmd), cmd
    assert machine_definitions(mm) == single.definitions()


SCENARIOS = {
    "policy re-applied to an existing queue, then cleared": [
        m.DeclareQueue("/", "q0"), m.SetPolicy("/", "p0", "^q", {"max-length": 5}),
        m.DeclareQueue("/", "q0"), m.ClearPolicy("/", "p0")],
    "a policy whose arguments do not validate: kept out of existing queues, 406 for new ones": [
        m.DeclareQueue("/", "q0"), m.SetPolicy("/", "p0", "^q", {"dead-letter-routing-key": "k"}),
        m.DeclareQueue("/", "q1")],
    "second declare with another x-max-length": [
        m.DeclareQueue("/", "q0", arguments={"x-max-length": 10}),
        m.DeclareQueue("/", "q0", arguments={"x-max-length": 20})],
    "auto-delete exchange goes with its last binding": [
        m.DeclareQueue("/", "q0"), m.DeclareExchange("/", "x0", "fanout", auto_delete=True),
        m.Bind("/", "x0", "q0"), m.Unbind("/", "x0", "q0"), m.Bind("/", "x0", "q0")],
    "another connection's exclusive queue": [
        m.DeclareQueue("/", "q0", exclusive=True, connection="c0"),
        m.DeclareQueue("/", "q0", exclusive=True, connection="c1"),
        m.Bind("/", "amq.direct", "q0", connection="c1"),
        m.DeleteQueue("/", "q0", connection="c1"), m.DeleteQueue("/", "q0", connection="c0")],
    "exchange-to-exchange binding goes with its destination": [
        m.DeclareExchange("/", "x0", "topic"), m.DeclareExchange("/", "x1", "fanout"),
        m.Bind("/", "x0", "x1", m.EXCHANGE, "a.*"), m.DeleteExchange("/", "x0", if_unused=True),
        m.DeleteExchange("/", "x1"), m.DeleteExchange("/", "x0", if_unused=True)],
    "vhost, user and permission lifecycle": [
        m.AddVhost("v1", "d", (), "guest"), m.SetPermission("u1", "v1"), m.PutUser("u1", "h"),
        m.SetPermission("u1", "v1", "^q"), m.SetPolicy("v1", "p0", ".*", {"max-length": 1}),
        m.DeleteVhost("v1"), m.ClearPermission("u1", "v1"), m.DeleteUser("u1")],
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenarios_answer_and_hold_what_one_broker_does(name: str) -> None:
    single = SingleBroker()
    mm = seeded_machine(single)
    for index, cmd in enumerate(SCENARIOS[name], start=1):
        assert normalise(cmd, mm.apply(index, cmd)) == single.run(cmd), cmd
        assert machine_definitions(mm) == single.definitions(), cmd
