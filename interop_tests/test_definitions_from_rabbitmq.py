"""A definitions file exported by a real RabbitMQ 3.10 node imports into our broker unchanged
(issue 13: "a file exported from RabbitMQ imports unchanged, its users log in with their
passwords"). The test makes the file itself on the interop RabbitMQ node
(``interop_tests/rabbitmq_node.py``): ``rabbitmqctl add_vhost`` / ``add_user`` (with a password)
/ ``set_user_tags`` / ``set_permissions`` / ``set_policy``, a topic exchange, a durable queue
with an argument and a binding declared by that user over AMQP, then ``rabbitmqctl
export_definitions``. The file goes to one of our brokers through ``POST /api/definitions`` and
to another through ``amqp-broker ctl import_definitions``; on each, the user logs in with its
password over pika, finds the objects, and a message published to the exchange reaches the queue
through the binding. Source: RabbitMQ "Definitions", rabbitmqctl(8).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator

import pika
import pytest

from interop_tests.conftest import REPO_ROOT, _free_port
from interop_tests.rabbitmq_node import RabbitMQUnavailable, rabbitmq_ctl, rabbitmq_uri
from interop_tests.test_management import _wait_http

pytestmark = pytest.mark.interop


def _ctl_ok(*args: str) -> str:
    out = rabbitmq_ctl(*args)
    assert out.returncode == 0, f"rabbitmqctl {args}: {out.stdout}\n{out.stderr}"
    return out.stdout


def _get(http: int, path: str, user: str = "guest", password: str = "guest") -> object:
    req = urllib.request.Request(f"http://127.0.0.1:{http}/api{path}", headers={
        "Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def exported() -> Iterator[tuple[dict, str, str, str]]:
    """(the definitions RabbitMQ exported, vhost, user, password), made on the RabbitMQ node."""
    try:
        uri = rabbitmq_uri()
        rabbitmq_ctl("version")
    except RabbitMQUnavailable as exc:
        pytest.skip(str(exc))
    tag = uuid.uuid4().hex[:8]
    vhost, user, password = f"shop-{tag}", f"clerk-{tag}", f"pw {tag} é"
    _ctl_ok("add_vhost", vhost)
    _ctl_ok("add_user", user, password)
    _ctl_ok("set_user_tags", user, "management")
    _ctl_ok("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
    params = pika.URLParameters(uri)
    params.virtual_host, params.credentials = vhost, pika.PlainCredentials(user, password)
    with pika.BlockingConnection(params) as conn:  # RabbitMQ itself checks the password
        ch = conn.channel()
        ch.exchange_declare("orders", "topic", durable=True)
        ch.queue_declare("new-orders", durable=True, arguments={"x-max-length": 100})
        ch.queue_bind("new-orders", "orders", "order.new.#")
    _ctl_ok("set_policy", "-p", vhost, "--apply-to", "queues", "ttl", "^new-",
            '{"message-ttl": 60000}')
    defs = json.loads(_ctl_ok("export_definitions", "-", "--format", "json"))
    try:
        yield defs, vhost, user, password
    finally:
        rabbitmq_ctl("delete_vhost", vhost)
        rabbitmq_ctl("delete_user", user)


def _check_imported(broker, http: int, vhost: str, user: str, password: str) -> None:
    params = pika.URLParameters(broker.uri)
    params.virtual_host, params.credentials = vhost, pika.PlainCredentials(user, password)
    with pika.BlockingConnection(params) as conn:  # RabbitMQ's hash, our check
        ch = conn.channel()
        ch.exchange_declare("orders", "topic", durable=True, passive=True)
        ch.queue_declare("new-orders", durable=True, passive=True,
                         arguments={"x-max-length": 100})
        ch.confirm_delivery()
        ch.basic_publish("orders", "order.new.42", b"imported", mandatory=True)
        method, _props, body = ch.basic_get("new-orders", auto_ack=True)
        assert method is not None and body == b"imported"
    assert _get(http, "/whoami", user, password) == {"name": user, "tags": ["management"]}
    q = _get(http, f"/queues/{vhost}/new-orders", user, password)
    assert isinstance(q, dict)
    assert (q["durable"], q["arguments"], q["policy"]) == (True, {"x-max-length": 100}, "ttl")
    policies = _get(http, f"/policies/{vhost}")
    assert [(p["name"], p["pattern"], p["apply-to"], p["definition"]) for p in policies] == [
        ("ttl", "^new-", "queues", {"message-ttl": 60000})]  # type: ignore[union-attr]
    perms = _get(http, f"/permissions/{vhost}/{user}")
    assert perms == {"user": user, "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"}


def test_rabbitmq_export_imports_via_api_and_ctl(exported, broker_factory, tmp_path):
    defs, vhost, user, password = exported
    assert defs["rabbit_version"].startswith("3.10")
    assert next(u for u in defs["users"] if u["name"] == user)["hashing_algorithm"] == \
        "rabbit_password_hashing_sha256"
    # POST /api/definitions, the body exactly as RabbitMQ wrote it
    http = _free_port()
    broker = broker_factory("--management-port", str(http))
    _wait_http(f"http://127.0.0.1:{http}/api/overview")
    body = json.dumps(defs).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{http}/api/definitions", data=body,
                                 method="POST", headers={
                                     "Authorization": "Basic " + base64.b64encode(
                                         b"guest:guest").decode(),
                                     "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 204
    _check_imported(broker, http, vhost, user, password)
    # amqp-broker ctl import_definitions FILE on another broker
    http2 = _free_port()
    broker2 = broker_factory("--management-port", str(http2))
    _wait_http(f"http://127.0.0.1:{http2}/api/overview")
    path = tmp_path / "from-rabbitmq.json"
    path.write_text(json.dumps(defs))
    out = subprocess.run([sys.executable, "-m", "amqp_broker", "ctl", "--url",
                          f"http://127.0.0.1:{http2}", "import_definitions", str(path)],
                         capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    _check_imported(broker2, http2, vhost, user, password)
