"""``/api/policies`` in process: PUT/GET/DELETE with RabbitMQ's shapes and 400 reasons, a policy
applied at declaration (arguments, ``policy``, ``effective_policy_definition``), a client's
redeclaration checked against what it declared, definitions export/import, the store."""

from __future__ import annotations

from pathlib import Path

from pamqp import commands as cmd

from amqp_broker.core import policy_store
from amqp_broker.core.broker import Broker
from amqp_broker.core.durability import Durability
from amqp_broker.core.tests.client import Client
from amqp_broker.definitions.store import DefinitionsStore

from .helpers import client, make, run

HA = {"pattern": r"^ha\.", "definition": {"ha-mode": "all", "message-ttl": 60000},
      "priority": 1, "apply-to": "queues"}


def test_policy_crud_and_refusals() -> None:
    mgmt = make()

    async def body() -> None:
        async with client(mgmt) as c:
            assert (await c.get("/api/policies")).json() == []
            assert (await c.put("/api/policies/%2F/ha-all", json=HA)).status_code == 201
            assert (await c.put("/api/policies/%2F/ha-all", json=HA)).status_code == 204
            one = (await c.get("/api/policies/%2F/ha-all")).json()
            assert one == {"vhost": "/", "name": "ha-all", **HA}
            assert (await c.get("/api/policies/%2F")).json() == [one]
            assert (await c.get("/api/policies")).json() == [one]
            for bad, reason in (
                    ({"pattern": ".*", "definition": {"foo": 1}}, "not recognised"),
                    ({"pattern": ".*", "definition": {"ha-mode": "most"}}, "ha-mode"),
                    ({"pattern": ".*", "definition": {"ha-mode": "exactly"}}, "ha-params"),
                    ({"pattern": ".*", "definition": {"ha-mode": "nodes", "ha-params": 2}},
                     "ha-params"),
                    ({"definition": {"ha-mode": "all"}}, "pattern")):
                r = await c.put("/api/policies/%2F/bad", json=bad)
                assert r.status_code == 400, r.text
                assert r.json()["error"] == "bad_request" and reason in r.json()["reason"]
            assert (await c.put("/api/policies/nope/p", json=HA)).status_code == 404
            assert (await c.get("/api/policies/%2F/bad")).status_code == 404
        async with client(mgmt, auth=None) as c:
            assert (await c.get("/api/policies")).status_code == 401
        async with client(mgmt) as c:
            assert (await c.delete("/api/policies/%2F/ha-all")).status_code == 204
            assert (await c.delete("/api/policies/%2F/ha-all")).status_code == 404
            assert (await c.get("/api/policies")).json() == []
    run(body)


def test_policy_applies_at_declaration_and_redeclare_compares_the_clients_arguments() -> None:
    mgmt = make()

    async def body() -> None:
        async with client(mgmt) as c:
            await c.put("/api/policies/%2F/ttl", json={"pattern": "^t", "definition": {
                "message-ttl": 60000, "max-length": 2, "ha-mode": "all"}})
            await c.put("/api/queues/%2F/t1", json={"durable": True,
                                                     "arguments": {"x-max-length": 5}})
            q = (await c.get("/api/queues/%2F/t1")).json()
            # no cluster here: ha-mode has no engine, the queue stays classic
            assert q["type"] == "classic" and q["policy"] == "ttl"
            assert q["arguments"] == {"x-max-length": 5}
            assert q["effective_policy_definition"] == {"message-ttl": 60000, "max-length": 2,
                                                        "ha-mode": "all"}
            await c.put("/api/queues/%2F/other", json={"durable": True})
            other = (await c.get("/api/queues/%2F/other")).json()
            assert other["policy"] == "" and other["effective_policy_definition"] == {}
    run(body)
    q = mgmt.broker.vhosts["/"].queues["t1"]
    assert q.settings.message_ttl == 60000 and q.settings.max_length == 5
    cl = Client(mgmt.broker)
    cl.handshake()
    cl.open_channel(1)
    # the client's own declaration again: equivalent (the policy's keys are not compared)
    cl.call(1, cmd.Queue.Declare(queue="t1", durable=True, arguments={"x-max-length": 5}))
    # a TTL the client never declared: 406, as on RabbitMQ (it compares declared arguments)
    cl.send(1, cmd.Queue.Declare(queue="t1", durable=True,
                                 arguments={"x-max-length": 5, "x-message-ttl": 1}))
    close = cl.expect(cmd.Channel.Close, 1)
    assert close.reply_code == 406 and "x-message-ttl" in close.reply_text


def test_definitions_carry_policies() -> None:
    source, target = make(), make()

    async def body() -> None:
        async with client(source) as c:
            await c.put("/api/policies/%2F/ha-all", json=HA)
            await c.put("/api/queues/%2F/ha.q", json={"durable": True})
            defs = (await c.get("/api/definitions")).json()
        assert defs["policies"] == [{"vhost": "/", "name": "ha-all", **HA}]
        assert {"name": "ha.q", "vhost": "/", "durable": True, "auto_delete": False,
                "arguments": {}} in defs["queues"]
        async with client(target) as c:
            assert (await c.post("/api/definitions", json=defs)).status_code == 204
            assert (await c.get("/api/policies/%2F/ha-all")).status_code == 200
            q = (await c.get("/api/queues/%2F/ha.q")).json()
            assert q["policy"] == "ha-all"
            bad = {"policies": [{"vhost": "/", "name": "x", "pattern": ".*",
                                 "definition": {"nope": 1}}]}
            r = await c.post("/api/definitions", json=bad)
            assert r.status_code == 400 and "not recognised" in r.json()["reason"]
    run(body)
    assert target.broker.vhosts["/"].queues["ha.q"].settings.message_ttl == 60000


def test_policies_survive_a_restart(tmp_path: Path) -> None:
    def broker() -> Broker:
        return Broker(durability=Durability(None, DefinitionsStore(tmp_path / "defs.db")))

    first = broker()
    mgmt = make(first)

    async def body() -> None:
        async with client(mgmt) as c:
            await c.put("/api/policies/%2F/ha-all", json=HA)
            await c.put("/api/policies/%2F/gone", json=HA)
            await c.delete("/api/policies/%2F/gone")
    run(body)
    assert first.durability.definitions is not None
    first.durability.definitions.close()
    second = broker()
    assert policy_store.load_policies(second) == 1
    assert [p.name for p in second.policies.list()] == ["ha-all"]
    assert second.policies.get("/", "ha-all").definition == HA["definition"]  # type: ignore[union-attr]
