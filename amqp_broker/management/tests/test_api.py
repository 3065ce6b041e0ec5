"""The management HTTP API in-process: RabbitMQ 3.x shapes and status codes for overview, queues,
exchanges, bindings, publish/get, users/vhosts/permissions, definitions, connections, health
checks; basic auth with tags and the guest loopback rule."""

from __future__ import annotations

import base64
import hashlib

from pamqp import commands

from amqp_broker.core.broker import Broker
from amqp_broker.core.tests.client import Client

from .helpers import client, make, run


def test_auth_rules() -> None:
    mgmt = make()

    async def body() -> None:
        async with client(mgmt, auth=None) as c:  # RabbitMQ 3.10's answers (differential test)
            r = await c.get("/api/overview")
            assert r.status_code == 401
            assert r.headers["www-authenticate"] == 'Basic realm="RabbitMQ Management"'
            assert r.content == b""
        async with client(mgmt, auth=("guest", "wrong")) as c:
            r = await c.get("/api/overview")
            assert r.status_code == 401
            assert r.headers["www-authenticate"] == 'Basic realm="RabbitMQ Management"'
            assert r.json() == {"error": "not_authorized", "reason": "Login failed"}
        async with client(mgmt, peer="10.1.2.3") as c:  # guest only from loopback
            assert (await c.get("/api/overview")).status_code == 401
        async with client(mgmt) as c:
            assert (await c.put("/api/users/plain", json={"password": "p", "tags": ""})
                    ).status_code == 201
            assert (await c.put("/api/users/mon", json={"password": "p",
                                                         "tags": "management"})).status_code == 201
        async with client(mgmt, auth=("plain", "p")) as c:
            r = await c.get("/api/overview")
            assert r.status_code == 401 and r.json()["reason"] == "Not management user"
            assert "www-authenticate" not in r.headers
        async with client(mgmt, auth=("mon", "p")) as c:
            assert (await c.get("/api/overview")).status_code == 200
            assert (await c.get("/api/users")).status_code == 401  # administrator only
            assert (await c.get("/api/whoami")).json() == {"name": "mon", "tags": ["management"]}
    run(body)


def test_overview_shape() -> None:
    mgmt = make()

    async def body() -> None:
        async with client(mgmt) as c:
            o = (await c.get("/api/overview")).json()
        for key in ("management_version", "rabbitmq_version", "cluster_name", "node",
                    "message_stats", "queue_totals", "object_totals", "listeners",
                    "exchange_types"):
            assert key in o
        assert o["object_totals"]["exchanges"] == len(list(mgmt.broker.vhosts["/"].routing.exchanges()))
        assert {x["protocol"] for x in o["listeners"]} == {"amqp", "http"}
        assert o["message_stats"]["publish_details"] == {"rate": 0.0}
    run(body)


def test_queue_lifecycle_publish_get() -> None:
    mgmt = make()

    async def body() -> None:
        async with client(mgmt) as c:
            assert (await c.put("/api/queues/%2F/q1", json={"durable": True})).status_code == 201
            assert (await c.put("/api/queues/%2F/q1", json={"durable": True})).status_code == 204
            r = await c.put("/api/queues/%2F/q1", json={"durable": False})
            assert r.status_code == 400 and r.json() == {
                "error": "bad_request", "reason": "inequivalent arg 'durable' for queue 'q1' in "
                "vhost '/': received 'false' but current is 'true'"}
            for i in range(3):
                r = await c.post("/api/exchanges/%2F/amq.default/publish", json={
                    "properties": {"delivery_mode": 2, "headers": {"n": i}},
                    "routing_key": "q1", "payload": f"m{i}", "payload_encoding": "string"})
                assert r.json() == {"routed": True}
            r = await c.post("/api/exchanges/%2F/amq.default/publish", json={
                "properties": {}, "routing_key": "nowhere", "payload": "x",
                "payload_encoding": "string"})
            assert r.json() == {"routed": False}
            q = (await c.get("/api/queues/%2F/q1")).json()
            assert (q["name"], q["vhost"], q["messages"], q["messages_ready"],
                    q["durable"], q["type"], q["state"]) == ("q1", "/", 3, 3, True, "classic",
                                                              "running")
            got = (await c.post("/api/queues/%2F/q1/get", json={
                "count": 2, "ackmode": "ack_requeue_true", "encoding": "auto"})).json()
            assert [m["payload"] for m in got] == ["m0", "m1"]
            assert got[0]["properties"] == {"delivery_mode": 2, "headers": {"n": 0}}
            assert got[0]["message_count"] == 2 and got[0]["payload_encoding"] == "string"
            assert (await c.get("/api/queues/%2F/q1")).json()["messages"] == 3  # requeued
            got = (await c.post("/api/queues/%2F/q1/get", json={
                "count": 1, "ackmode": "ack_requeue_false", "encoding": "base64"})).json()
            assert got[0]["payload"] == "bTA=" and got[0]["redelivered"] is True
            assert (await c.get("/api/queues/%2F/q1")).json()["messages"] == 2
            page = (await c.get("/api/queues?page=1&page_size=1&columns=name,messages")).json()
            assert page == {"filtered_count": 1, "item_count": 1, "page": 1, "page_count": 1,
                            "page_size": 1, "total_count": 1,
                            "items": [{"name": "q1", "messages": 2}]}
            assert (await c.get("/api/queues?page=1&page_size=501")).status_code == 400
            assert (await c.delete("/api/queues/%2F/q1/contents")).status_code == 204
            assert (await c.get("/api/queues/%2F/q1")).json()["messages"] == 0
            assert (await c.delete("/api/queues/%2F/q1")).status_code == 204
            assert (await c.get("/api/queues/%2F/q1")).status_code == 404
            assert (await c.get("/api/queues/nope")).status_code == 404
    run(body)


def test_exchanges_and_bindings() -> None:
    mgmt = make()

    async def body() -> None:
        async with client(mgmt) as c:
            assert (await c.put("/api/exchanges/%2F/ex", json={"type": "topic"})).status_code \
                == 201
            # no type: a direct exchange (RabbitMQ 3.10)
            assert (await c.put("/api/exchanges/%2F/ex2", json={})).status_code == 201
            assert (await c.get("/api/exchanges/%2F/ex2")).json()["type"] == "direct"
            await c.put("/api/queues/%2F/q", json={})
            r = await c.post("/api/bindings/%2F/e/ex/q/q", json={"routing_key": "a.#"})
            assert r.status_code == 201
            assert r.headers["location"] == "/api/bindings/%2F/e/ex/q/q/a.%23"
            bs = (await c.get("/api/bindings/%2F/e/ex/q/q")).json()
            assert bs == [{"source": "ex", "vhost": "/", "destination": "q",
                           "destination_type": "queue", "routing_key": "a.#", "arguments": {},
                           "properties_key": "a.#"}]
            r = await c.post("/api/exchanges/%2F/ex/publish", json={
                "properties": {}, "routing_key": "a.b", "payload": "x",
                "payload_encoding": "string"})
            assert r.json() == {"routed": True}
            assert (await c.delete("/api/bindings/%2F/e/ex/q/q/a.%23")).status_code == 204
            assert (await c.get("/api/bindings/%2F/e/ex/q/q")).json() == []
            names = [x["name"] for x in (await c.get("/api/exchanges/%2F")).json()]
            assert "" in names and "ex" in names and "amq.topic" in names
            assert (await c.delete("/api/exchanges/%2F/ex")).status_code == 204
            assert (await c.get("/api/exchanges/%2F/ex")).status_code == 404
            r = await c.delete("/api/exchanges/%2F/amq.direct")
            assert r.status_code == 401  # 403 ACCESS_REFUSED from the broker
    run(body)


def test_users_vhosts_permissions() -> None:
    mgmt = make()

    async def body() -> None:
        async with client(mgmt) as c:
            assert (await c.put("/api/vhosts/v1", json={"description": "d"})).status_code == 201
            assert (await c.put("/api/users/u", json={"password": "pw", "tags": "monitoring"})
                    ).status_code == 201
            r = await c.put("/api/permissions/v1/u", json={"configure": "^$", "write": ".*",
                                                           "read": ".*"})
            assert r.status_code == 201
            perms = (await c.get("/api/permissions")).json()
            assert {"user": "u", "vhost": "v1", "configure": "^$", "write": ".*",
                    "read": ".*"} in perms
            u = (await c.get("/api/users/u")).json()
            assert u["tags"] == ["monitoring"]
            assert u["hashing_algorithm"] == "rabbit_password_hashing_sha256"
            vh = (await c.get("/api/vhosts/v1")).json()
            assert vh["name"] == "v1" and vh["description"] == "d"
            assert (await c.put("/api/permissions/v1/u", json={"write": ".*"})).status_code \
                == 400
        async with client(mgmt, auth=("u", "pw")) as c:  # configure "^$": declares refused
            r = await c.put("/api/queues/v1/q", json={})
            assert r.status_code == 401
            assert r.json() == {"error": "not_authorised", "reason": "Access refused."}  # 3.10's
        async with client(mgmt) as c:
            assert (await c.delete("/api/users/u")).status_code == 204
            assert (await c.get("/api/users/u")).status_code == 404
            assert (await c.delete("/api/vhosts/v1")).status_code == 204
            assert (await c.get("/api/vhosts/v1")).status_code == 404
    run(body)


def test_definitions_round_trip_and_rabbitmq_users_log_in() -> None:
    source = make()
    target = make()
    # a user as RabbitMQ 3.10 exports it: base64(salt + SHA-256(salt + "s3cret"))
    salt = bytes.fromhex("c0ffee01")
    rabbit_hash = base64.b64encode(salt + hashlib.sha256(salt + b"s3cret").digest()).decode()
    rabbit_user = {"name": "app", "password_hash": rabbit_hash,
                   "hashing_algorithm": "rabbit_password_hashing_sha256",
                   "tags": ["management"], "limits": {}}

    async def body() -> None:
        async with client(source) as c:
            await c.put("/api/exchanges/%2F/dx", json={"type": "direct", "durable": True})
            await c.put("/api/queues/%2F/dq", json={"durable": True,
                                                     "arguments": {"x-max-length": 10}})
            await c.post("/api/bindings/%2F/e/dx/q/dq", json={"routing_key": "k"})
            defs = (await c.get("/api/definitions")).json()
        assert {"name": "dq", "vhost": "/", "durable": True, "auto_delete": False,
                "arguments": {"x-max-length": 10}} in defs["queues"]
        assert defs["exchanges"][0]["name"] == "dx"
        assert defs["bindings"] == [{"source": "dx", "vhost": "/", "destination": "dq",
                                     "destination_type": "queue", "routing_key": "k",
                                     "arguments": {}}]
        defs["users"].append(rabbit_user)
        defs["permissions"].append({"user": "app", "vhost": "/", "configure": ".*",
                                    "write": ".*", "read": ".*"})
        async with client(target) as c:
            assert (await c.post("/api/definitions", json=defs)).status_code == 204
            assert (await c.get("/api/queues/%2F/dq")).json()["arguments"] == {
                "x-max-length": 10}
            assert len((await c.get("/api/bindings/%2F/e/dx/q/dq")).json()) == 1
    run(body)
    assert target.broker.access.users["app"].password_hash == rabbit_hash
    cl = Client(target.broker)
    cl.handshake(user="app", password="s3cret")
    cl.open_channel(1)


def test_imported_hash_logs_in_over_amqp() -> None:
    from amqp_broker.core.access import hash_password
    mgmt = make()
    defs = {"users": [{"name": "imp", "password_hash": hash_password("pw"),
                       "hashing_algorithm": "rabbit_password_hashing_sha256",
                       "tags": "administrator"}],
            "permissions": [{"user": "imp", "vhost": "/", "configure": ".*", "write": ".*",
                             "read": ".*"}]}

    async def body() -> None:
        async with client(mgmt) as c:
            assert (await c.post("/api/definitions", json=defs)).status_code == 204
        async with client(mgmt, auth=("imp", "pw")) as c:
            assert (await c.get("/api/users")).status_code == 200
    run(body)
    cl = Client(mgmt.broker)
    cl.handshake(user="imp", password="pw")
    cl.open_channel(1)


def test_connections_listing_and_close() -> None:
    broker = Broker()
    mgmt = make(broker)
    cl = Client(broker, port=51234)
    cl.handshake()
    cl.open_channel(1)
    cl.call(1, commands.Confirm.Select())

    async def body() -> None:
        async with client(mgmt) as c:
            conns = (await c.get("/api/connections")).json()
            assert len(conns) == 1
            name = conns[0]["name"]
            assert name == "127.0.0.1:51234 -> 127.0.0.1:5672"
            assert conns[0]["user"] == "guest" and conns[0]["channels"] == 1
            chans = (await c.get("/api/channels")).json()
            assert chans[0]["confirm"] is True and chans[0]["number"] == 1
            from urllib.parse import quote
            r = await c.delete(f"/api/connections/{quote(name, safe='')}",
                               headers={"X-Reason": "bye"})
            assert r.status_code == 204
    run(body)
    close = cl.expect(commands.Connection.Close)
    assert (close.reply_code, close.reply_text) == (320, "CONNECTION_FORCED - bye")


def test_health_checks() -> None:
    mgmt = make()

    async def body() -> None:
        async with client(mgmt) as c:
            assert (await c.get("/api/health/checks/alarms")).json() == {"status": "ok"}
            assert (await c.get("/api/health/checks/port-listener/5672")).status_code == 200
            r = await c.get("/api/health/checks/port-listener/1234")
            assert r.status_code == 503 and r.json()["status"] == "failed"
            mgmt.broker.set_alarm("disk", True)
            r = await c.get("/api/health/checks/local-alarms")
            assert r.status_code == 503
            assert r.json()["alarms"] == [{"node": mgmt.broker.settings.node_name,
                                           "resource": "disk"}]
            mgmt.broker.set_alarm("disk", False)
            assert (await c.get("/api/aliveness-test/%2F")).json() == {"status": "ok"}
            assert (await c.get("/api/policies")).json() == []
    run(body)


def test_queue_fields_without_a_value_are_not_null() -> None:
    """rabbitmqadmin's tables trip over null: policy and consumer tags are "" when there is
    none, consumer_utilisation a number; a single queue lists its consumers
    (``consumer_details``), a single exchange its (empty) rate lists, as RabbitMQ's."""
    broker = Broker()
    mgmt = make(broker)
    cl = Client(broker)
    cl.handshake()
    cl.open_channel(1)
    cl.call(1, commands.Queue.Declare(queue="idle"))
    cl.call(1, commands.Queue.Declare(queue="busy"))
    cl.call(1, commands.Basic.Consume(queue="busy", consumer_tag="only", exclusive=True))

    async def body() -> None:
        async with client(mgmt) as c:
            idle = (await c.get("/api/queues/%2F/idle")).json()
            busy = (await c.get("/api/queues/%2F/busy")).json()
            x = (await c.get("/api/exchanges/%2F/amq.direct")).json()
            listed = (await c.get("/api/queues")).json()
        for q in (idle, busy, *listed):
            assert q["policy"] == "" and q["operator_policy"] == ""
            assert None not in (q["exclusive_consumer_tag"], q["single_active_consumer_tag"],
                                q["consumer_utilisation"])
            assert "owner_pid_details" not in q and "idle_since" not in q
        assert (idle["exclusive_consumer_tag"], idle["consumer_utilisation"]) == ("", 0)
        assert idle["consumer_details"] == [] and idle["incoming"] == idle["deliveries"] == []
        assert (busy["exclusive_consumer_tag"], busy["consumer_utilisation"]) == ("only", 1.0)
        assert [d["consumer_tag"] for d in busy["consumer_details"]] == ["only"]
        assert (x["incoming"], x["outgoing"]) == ([], [])
    run(body)
