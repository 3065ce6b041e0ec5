"""The management HTTP API against both brokers (issue 13; the brief's differential tests): every
test here runs against our broker and against the RabbitMQ 3.10 node with its
rabbitmq_management plugin (``management_broker``), and asserts what a user of RabbitMQ's tools
sees, so RabbitMQ's behaviour is the specification:

- RabbitMQ's own ``rabbitmqadmin`` (Debian's rabbitmq-server package, run with the system
  python3): declare, publish, list, get, export, delete, import, with its printed answers;
- the API's status codes and error bodies for the requests those tools make (201 / 204 / 404 /
  400 / 401, ``{"error", "reason"}``), and the keys of the objects they read;
- Celery Flower's broker client (``flower.utils.broker.Broker``, what its Broker page calls)
  reading the lengths of queues a test declared and filled.

RabbitMQ's management statistics lag by up to its ``collect_statistics_interval`` (5 s): a count
read through its API is polled, bounded, until it shows. Queue and exchange names are unique per
test (the RabbitMQ node is shared by the session).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import pika
import pytest

pytestmark = pytest.mark.interop

RABBITMQADMIN = shutil.which("rabbitmqadmin") or "/usr/bin/rabbitmqadmin"
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "python3"
needs_rabbitmqadmin = pytest.mark.skipif(
    not os.path.exists(RABBITMQADMIN),
    reason="rabbitmqadmin not installed (Debian rabbitmq-server; interop_tests/setup.sh)")


def api(base: str, path: str, method: str = "GET", body: Any = None, user: str = "guest",
        password: str = "guest", raw: bytes | None = None) -> tuple[int, Any]:
    """One request to ``base``/api``path``: (status, decoded JSON body or None)."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + "/api" + path, method=method, data=data, headers={
        "Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode(),
        "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            status, text = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, text = err.code, err.read()
    return status, json.loads(text) if text.strip() else None


def eventually(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    """Poll ``check`` until it returns a truthy value (RabbitMQ's statistics lag), bounded."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.25)


def admin(broker, *args: str) -> str:
    """``rabbitmqadmin`` against ``broker``'s API; its stdout (asserts exit code 0)."""
    port = str(urllib.parse.urlsplit(broker.api_url).port)
    out = subprocess.run([SYSTEM_PYTHON, RABBITMQADMIN, "-H", "127.0.0.1", "-P", port,
                          "-u", "guest", "-p", "guest", *args], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, f"rabbitmqadmin {args}: {out.stdout}\n{out.stderr}"
    return out.stdout


@needs_rabbitmqadmin
def test_rabbitmqadmin_declare_publish_list_get_export_import(management_broker, unique_name,
                                                              tmp_path):
    b = management_broker
    q, x = f"{unique_name}.q", f"{unique_name}.x"
    assert admin(b, "declare", "queue", f"name={q}", "durable=true") == "queue declared\n"
    assert admin(b, "declare", "exchange", f"name={x}", "type=fanout") == "exchange declared\n"
    assert admin(b, "declare", "binding", f"source={x}",
                 f"destination={q}") == "binding declared\n"
    assert admin(b, "publish", f"exchange={x}", "routing_key=any",
                 "payload=hello-admin") == "Message published\n"
    assert admin(b, "publish", "exchange=amq.default", f"routing_key={q}",
                 "payload=second") == "Message published\n"
    assert admin(b, "publish", "exchange=amq.default", "routing_key=nowhere." + unique_name,
                 "payload=lost") == "Message published but NOT routed\n"
    eventually(lambda: f"{q}\t2\n" in admin(b, "-f", "tsv", "-q", "list", "queues", "name",
                                            "messages"), "the queue lists 2 messages")
    got = json.loads(admin(b, "-f", "raw_json", "get", f"queue={q}", "count=2",
                           "ackmode=ack_requeue_false"))
    assert [m["payload"] for m in got] == ["hello-admin", "second"]
    assert [m["message_count"] for m in got] == [1, 0]
    assert [(m["exchange"], m["routing_key"]) for m in got] == [(x, "any"), ("", q)]
    for m in got:
        assert {"payload_bytes", "redelivered", "exchange", "routing_key", "message_count",
                "properties", "payload", "payload_encoding"} <= set(m), m
        assert (m["payload_encoding"], m["redelivered"]) == ("string", False)
    assert x in admin(b, "list", "exchanges")
    bindings = admin(b, "-f", "tsv", "-q", "list", "bindings", "source", "destination")
    assert f"{x}\t{q}\n" in bindings
    export = tmp_path / "defs.json"
    assert admin(b, "export", str(export)).startswith("Exported definitions for")
    defs = json.loads(export.read_text())
    assert {"name": q, "vhost": "/", "durable": True, "auto_delete": False,
            "arguments": {}}.items() <= next(d for d in defs["queues"] if d["name"] == q).items()
    assert {"source": x, "vhost": "/", "destination": q, "destination_type": "queue",
            "routing_key": "", "arguments": {}} in defs["bindings"]
    guest = next(u for u in defs["users"] if u["name"] == "guest")
    assert guest["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    assert guest["tags"] in (["administrator"], "administrator")
    # delete, then import the export: the queue, exchange and binding come back
    assert admin(b, "delete", "queue", f"name={q}") == "queue deleted\n"
    assert admin(b, "delete", "exchange", f"name={x}") == "exchange deleted\n"
    assert q not in admin(b, "list", "queues", "name")
    assert admin(b, "import", str(export)).startswith("Uploaded definitions from")
    assert q in admin(b, "list", "queues", "name")
    assert f"{x}\t{q}\n" in admin(b, "-f", "tsv", "-q", "list", "bindings", "source",
                                  "destination")
    admin(b, "delete", "queue", f"name={q}")
    admin(b, "delete", "exchange", f"name={x}")


def test_status_codes_and_error_bodies(management_broker, unique_name):
    base = management_broker.api_url
    q = f"{unique_name}.q"
    path = f"/queues/%2F/{q}"
    assert api(base, path) == (404, {"error": "Object Not Found", "reason": "Not Found"})
    assert api(base, path, "PUT", {"durable": True, "arguments": {"x-max-length": 5}})[0] == 201
    assert api(base, path, "PUT", {"durable": True, "arguments": {"x-max-length": 5}})[0] == 204
    status, body = api(base, path, "PUT", {"durable": False})
    assert status == 400 and body["error"] == "bad_request"
    assert "inequivalent arg 'durable'" in body["reason"]
    # (RabbitMQ shows a new queue's counts, state and consumers once its statistics were
    # collected, not all in the same round)
    keys = {"name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "node", "state",
            "consumers", "messages", "messages_ready", "messages_unacknowledged", "type"}
    status, body = eventually(lambda: (r := api(base, path))[0] == 200 and keys <= set(r[1])
                              and r, "the queue's statistics")
    assert keys <= set(body)
    assert (body["name"], body["vhost"], body["durable"], body["type"]) == (q, "/", True,
                                                                          "classic")
    assert body["arguments"] == {"x-max-length": 5}
    status, body = api(base, "/exchanges/%2F/amq.default/publish", "POST", {
        "properties": {}, "routing_key": q, "payload": "p", "payload_encoding": "string"})
    assert (status, body) == (200, {"routed": True})
    status, body = api(base, "/exchanges/%2F/amq.default/publish", "POST", {
        "properties": {}, "routing_key": "nowhere." + q, "payload": "p",
        "payload_encoding": "string"})
    assert (status, body) == (200, {"routed": False})
    none = f"{unique_name}.none"
    status, body = api(base, f"/exchanges/%2F/{none}/publish", "POST", {
        "properties": {}, "routing_key": q, "payload": "p", "payload_encoding": "string"})
    assert (status, body) == (400, {"error": "bad_request", "reason":
                                    f"404 NOT_FOUND - no exchange '{none}' in vhost '/'"})
    assert api(base, "/exchanges/%2F/amq.default/publish", "POST", {
        "routing_key": q, "payload": "p", "payload_encoding": "string"}) == (
        400, {"error": "bad_request", "reason": "[{key_missing,properties}]"})
    status, got = api(base, f"{path}/get", "POST", {"count": 5, "ackmode": "ack_requeue_true",
                                                    "encoding": "auto"})
    assert status == 200 and [m["payload"] for m in got] == ["p"]
    assert api(base, f"{path}/get", "POST", {"count": 1}) == (
        400, {"error": "bad_request", "reason": "[{key_missing,ackmode},{key_missing,encoding}]"})
    assert api(base, f"/queues/%2F/{none}/get", "POST", {
        "count": 1, "ackmode": "ack_requeue_true", "encoding": "auto"}) == (
        404, {"error": "not_found", "reason": f"NOT_FOUND - no queue '{none}' in vhost '/'"})
    assert api(base, f"/bindings/%2F/e/{none}/q/{q}", "POST", {}) == (
        404, {"error": "not_found", "reason": f"no exchange '{none}' in vhost '/'"})
    assert api(base, "/overview", user="guest", password="wrong")[0] == 401
    assert api(base, f"/queues/%2F/{unique_name}.bad", "PUT", raw=b"{not json") == (
        400, {"error": "bad_request", "reason": "not_json"})
    assert api(base, "/queues/%2F/amq.reserved", "PUT", {}) == (
        401, {"error": "not_authorised", "reason": "Access refused."})
    assert api(base, "/exchanges/%2F/amq.topic", "DELETE") == (
        401, {"error": "not_authorised", "reason": "Access refused."})
    assert api(base, f"/vhosts/{none}")[0] == 404
    assert api(base, f"/users/{none}")[0] == 404
    assert api(base, f"/users/{none}", "PUT", {"password": "pw"}) == (
        400, {"error": "bad_request", "reason": "tags_not_present"})
    grant = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api(base, f"/permissions/%2F/{none}", "PUT", grant) == (
        400, {"error": "bad_request", "reason": "vhost_or_user_not_found"})
    assert api(base, "/permissions/%2F/guest", "PUT", {"configure": ".*"}) == (
        400, {"error": "bad_request", "reason": "[{key_missing,write},{key_missing,read}]"})
    # an exchange declared without a type is a direct one
    assert api(base, f"/exchanges/%2F/{unique_name}.x", "PUT", {})[0] == 201
    assert api(base, f"/exchanges/%2F/{unique_name}.x")[1]["type"] == "direct"
    assert api(base, f"/exchanges/%2F/{unique_name}.x", "DELETE")[0] == 204
    # the lists answer with a trailing slash too (Flower asks for /api/queues/)
    status, listed = api(base, "/queues/")
    assert status == 200 and q in [x["name"] for x in listed]
    # a user updated without a password has none any more; one created without gets a random one
    assert api(base, f"/users/{none}", "PUT", {"password": "pw", "tags": ""})[0] == 201
    assert api(base, "/whoami", user=none, password="pw")[0] == 401  # no tag: not allowed in
    assert api(base, f"/users/{none}", "PUT", {"tags": "monitoring"})[0] == 204
    assert api(base, f"/users/{none}")[1]["password_hash"] == ""
    assert api(base, "/whoami", user=none, password="pw")[0] == 401
    assert api(base, f"/users/{none}", "DELETE")[0] == 204
    assert api(base, f"/users/{none}", "PUT", {"tags": "monitoring"})[0] == 201
    assert api(base, f"/users/{none}")[1]["password_hash"] != ""
    assert api(base, f"/users/{none}", "DELETE")[0] == 204
    assert api(base, f"{path}/contents", "DELETE")[0] == 204
    assert api(base, path, "DELETE")[0] == 204
    assert api(base, path, "DELETE")[0] == 404
    status, overview = api(base, "/overview")
    assert status == 200
    assert {"management_version", "rabbitmq_version", "cluster_name", "node", "message_stats",
            "queue_totals", "object_totals", "listeners"} <= set(overview)
    assert {"queues", "exchanges", "connections", "channels",
            "consumers"} <= set(overview["object_totals"])


def test_flower_reads_queue_lengths(management_broker, unique_name):
    """Celery Flower's Broker page client (``flower.utils.broker.Broker``), pointed at the API as
    its docs show (``--broker-api=http://guest:guest@HOST:15672/api/``), lists the lengths of the
    queues it is asked about."""
    broker_module = pytest.importorskip("flower.utils.broker")
    b = management_broker
    names = [f"{unique_name}.a", f"{unique_name}.b"]
    with pika.BlockingConnection(pika.URLParameters(b.uri)) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        for count, name in zip((3, 1), names, strict=True):
            ch.queue_declare(name)
            for i in range(count):
                ch.basic_publish("", name, b"m%d" % i)
        # one message of .a unacknowledged
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume(names[0], lambda *_: None)
        conn.process_data_events(0.2)
        split = urllib.parse.urlsplit(b.api_url)
        flower = broker_module.Broker(f"amqp://guest:guest@127.0.0.1:{b.port}//",
                                      http_api=f"http://guest:guest@{split.netloc}/api/")

        def lengths() -> dict | None:
            # (RabbitMQ lists a new queue before its first statistics: no counts yet)
            got = {q["name"]: (q.get("messages"), q.get("messages_ready"),
                               q.get("messages_unacknowledged"), q.get("consumers"))
                   for q in asyncio.run(flower.queues(names))}
            want = {names[0]: (3, 2, 1, 1), names[1]: (1, 1, 0, 0)}
            return got if got == want else None

        eventually(lengths, "Flower's broker client shows the queue lengths")
        ch.queue_delete(names[0])
        ch.queue_delete(names[1])


def _raw(base: str, path: str, auth: tuple[str, str] | None) -> tuple[int, str | None, bytes]:
    """GET ``base``/api``path`` with ``auth`` (None: no Authorization header): (status,
    WWW-Authenticate header or None, body)."""
    headers = {} if auth is None else {"Authorization": "Basic " + base64.b64encode(
        f"{auth[0]}:{auth[1]}".encode()).decode()}
    req = urllib.request.Request(base + "/api" + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, resp.headers.get("www-authenticate"), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("www-authenticate"), err.read()


def test_failed_logins_answer_as_rabbitmq(management_broker, unique_name):
    """RabbitMQ 3.10 challenges (``WWW-Authenticate``) a request without credentials (no body)
    or with wrong ones (``not_authorized``), not one refused for its user's tags."""
    base = management_broker.api_url
    realm = 'Basic realm="RabbitMQ Management"'
    assert _raw(base, "/whoami", None) == (401, realm, b"")
    status, challenge, body = _raw(base, "/whoami", ("guest", "wrong"))
    assert (status, challenge) == (401, realm)
    assert json.loads(body) == {"error": "not_authorized", "reason": "Login failed"}
    user = f"{unique_name}.user"
    assert api(base, f"/users/{user}", "PUT", {"password": "pw", "tags": ""})[0] == 201
    try:
        status, challenge, body = _raw(base, "/whoami", (user, "pw"))
        assert (status, challenge) == (401, None)
        assert json.loads(body) == {"error": "not_authorised", "reason": "Not management user"}
    finally:
        api(base, f"/users/{user}", "DELETE")


@needs_rabbitmqadmin
def test_rabbitmqadmin_lists_queues_with_their_policy(management_broker, unique_name):
    """``rabbitmqadmin list queues name policy`` in a vhost of this test's own: a queue with a
    policy lists the same on both brokers. A queue without one lists with an empty policy here;
    on RabbitMQ 3.10 the same command crashes, since its API gives that queue ``"policy": null``
    (``shapes``' module docstring: the one field shape where we deliberately differ)."""
    b = management_broker
    vhost = unique_name
    grant = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api(b.api_url, f"/vhosts/{vhost}", "PUT", {})[0] in (201, 204)
    try:
        assert api(b.api_url, f"/permissions/{vhost}/guest", "PUT", grant)[0] in (201, 204)
        assert api(b.api_url, f"/policies/{vhost}/cap", "PUT", {
            "pattern": r"^with\.", "definition": {"max-length": 100},
            "apply-to": "queues"})[0] in (201, 204)
        assert api(b.api_url, f"/queues/{vhost}/with.q", "PUT", {})[0] == 201

        def listing() -> subprocess.CompletedProcess:
            port = str(urllib.parse.urlsplit(b.api_url).port)
            return subprocess.run([SYSTEM_PYTHON, RABBITMQADMIN, "-H", "127.0.0.1", "-P", port,
                                   "-u", "guest", "-p", "guest", "-V", vhost, "list", "queues",
                                   "name", "policy"], capture_output=True, text=True, timeout=60)

        with_policy = ("+--------+--------+\n"
                       "|  name  | policy |\n"
                       "+--------+--------+\n"
                       "| with.q | cap    |\n"
                       "+--------+--------+\n")
        eventually(lambda: listing().stdout == with_policy, "the queue lists with its policy")
        assert api(b.api_url, f"/queues/{vhost}/without.q", "PUT", {})[0] == 201
        if b.is_rabbitmq:
            crash = "TypeError: object of type 'NoneType' has no len()"
            eventually(lambda: crash in (out := listing()).stderr and out.returncode == 1,
                       "RabbitMQ 3.10's rabbitmqadmin trips over its policy null")
        else:
            out = listing()
            assert out.returncode == 0, out.stderr
            assert out.stdout == ("+-----------+--------+\n"
                                  "|   name    | policy |\n"
                                  "+-----------+--------+\n"
                                  "| with.q    | cap    |\n"
                                  "| without.q |        |\n"
                                  "+-----------+--------+\n")
    finally:
        api(b.api_url, f"/vhosts/{vhost}", "DELETE")
