"""Dynamic shovels (issue 27), as a user of RabbitMQ's ``rabbitmq_shovel`` sees them.

Differential (``management_broker``: ours and the private RabbitMQ 3.10 node with its shovel
plugins): the same ``shovel`` parameter JSON is refused with the same 400 texts, accepted with
the same answers (201, 204, the GET shapes, ``/api/shovels`` running with its ends, restart,
delete), and moves a message with the ``x-shovelled`` forward header. ``amqp-broker ctl``'s
set_parameter / list_parameters / shovel_status / clear_parameter and the definitions export
and import carry the parameter. Ours only, against the
private RabbitMQ node: a shovel from RabbitMQ to ours and one from ours to RabbitMQ, on-confirm,
persistent messages, both run by one broker of ours, which is killed with SIGKILL in the middle
and started again: every message arrives (duplicates are counted and allowed: at-least-once),
none is lost. ``N_MESSAGES`` (default 2000) is kept small for ``make test``;
``AMQP_SHOVEL_MESSAGES=100000`` runs the issue's 100,000.
"""

from __future__ import annotations

import json
import os
import socket
from collections import Counter
from pathlib import Path

import pika
import pytest

from clients.blocking import BlockingConnection
from clients.message import Properties
from interop_tests.conftest import skip_if_rabbitmq, start_broker
from interop_tests.test_management_ctl import ctl
from interop_tests.test_management_differential import api, eventually

pytestmark = pytest.mark.interop

N_MESSAGES = int(os.environ.get("AMQP_SHOVEL_MESSAGES", "2000"))

#: (value, RabbitMQ 3.10's reason) for values it refuses (read from a 3.10 node)
REFUSED = [
    ({"src-uri": "amqp://", "src-queue": "a"},
     'Key "dest-uri" not found in {name}'),
    ({"src-queue": 5},
     'Key "dest-uri" not found in {name}\nsrc-queue should be binary, actually was 5\n'
     'Key "src-uri" not found in {name}'),
    ({"src-uri": "amqp://", "dest-uri": "amqp://"},
     "Must specify 'src-exchange' or 'src-queue'"),
    ({"src-uri": "amqp://", "dest-uri": "amqp://", "src-queue": "a", "src-exchange": "x"},
     "Cannot specify 'src-exchange' and 'src-queue'"),
    ({"src-uri": "amqp://", "dest-uri": "amqp://", "src-queue": "a", "dest-queue": "b",
      "dest-exchange": "x"}, "Cannot specify 'dest-exchange' and 'dest-queue'"),
    ({"src-uri": "amqp://", "dest-uri": "amqp://", "src-queue": "a", "ack-mode": "x",
      "reconnect-delay": "y"},
     'ack-mode should be one of [&lt;&lt;"no-ack"&gt;&gt;,&lt;&lt;"on-publish"&gt;&gt;,'
     '&lt;&lt;"on-confirm"&gt;&gt;], actually was &lt;&lt;"x"&gt;&gt;\n'
     'reconnect-delay should be a number, actually was &lt;&lt;"y"&gt;&gt;'),
    ({"src-uri": "amqp://", "dest-uri": "amqp://", "src-queue": "a", "src-delete-after": -1},
     'src-delete-after should be a number greater than or equal to 0, "never" or '
     '"queue-length", actually was -1'),
    ({"src-uri": "amqp://", "dest-uri": "amqp://", "src-queue": "a", "bogus": 1},
     'Unrecognised terms [{&lt;&lt;"bogus"&gt;&gt;,1}] in {name}'),
    ({"src-uri": "foo://x", "dest-uri": "amqp://x:99999", "src-queue": "a"},
     '"amqp://x:99999" not a valid URI: {{port_out_of_range,99999},"amqp://x:99999"}\n'
     '"foo://x" not a valid URI: {{unexpected_uri_scheme,"foo"},"foo://x"}'),
    ({"src-uri": 5, "dest-uri": "amqp://", "src-queue": "a"},
     "src-uri should be list, actually was 5"),
    ({"src-uri": "amqp://", "dest-uri": "amqp://", "src-queue": "a",
      "add-forward-headers": "x", "dest-publish-properties": 5,
      "dest-add-timestamp-header": 1},
     "dest-publish-properties not a list 5\n"
     "dest-add-timestamp-header should be boolean, actually was 1\n"
     'add-forward-headers should be boolean, actually was &lt;&lt;"x"&gt;&gt;'),
]


def test_shovel_parameters_and_status_as_rabbitmq(management_broker, unique_name):
    b = management_broker
    base, name = b.api_url, unique_name
    path = f"/parameters/shovel/%2F/{name}"
    for value, reason in REFUSED:
        assert api(base, path, "PUT", {"value": value}) == (400, {
            "error": "bad_request",
            "reason": "Validation failed\n\n" + reason.replace("{name}", name) + "\n"}), value
    src, dest = f"{name}.src", f"{name}.dest"
    value = {"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://",
             "dest-queue": dest, "dest-add-forward-headers": True}
    assert api(base, path, "PUT", {"value": value})[0] == 201
    assert api(base, path, "PUT", {"value": value})[0] == 204
    expected = {"value": value, "vhost": "/", "component": "shovel", "name": name}
    assert api(base, path) == (200, expected)
    assert expected in api(base, "/parameters")[1]
    assert api(base, "/parameters/shovel/%2F/nope")[0] == 404

    def running():
        mine = [s for s in api(base, "/shovels")[1] if s["name"] == name]
        return mine if mine and mine[0]["state"] == "running" else None

    [status] = eventually(running, "the shovel running")
    assert {k: status[k] for k in ("vhost", "type", "src_uri", "src_queue", "dest_uri",
                                   "dest_queue", "src_protocol", "dest_protocol")} == {
        "vhost": "/", "type": "dynamic", "src_uri": "amqp://", "src_queue": src,
        "dest_uri": "amqp://", "dest_queue": dest, "src_protocol": "amqp091",
        "dest_protocol": "amqp091"}
    # a message moves, with the forward header naming the shovel
    conn = pika.BlockingConnection(pika.URLParameters(b.uri))
    try:
        ch = conn.channel()
        ch.basic_publish("", src, b"hello", pika.BasicProperties(delivery_mode=2))

        def shovelled():
            method, props, body = ch.basic_get(dest, auto_ack=True)
            return (props, body) if method else None

        props, body = eventually(shovelled, "the message shovelled")
    finally:
        conn.close()
    assert body == b"hello" and props.delivery_mode == 2
    [forward] = props.headers["x-shovelled"]
    keys = ("shovel-name", "shovel-type", "shovel-vhost", "src-queue", "dest-queue")
    assert {k: forward.get(k) for k in keys} == {
        "shovel-name": name, "shovel-type": "dynamic", "shovel-vhost": "/", "src-queue": src,
        "dest-queue": dest}, forward
    assert api(base, f"/shovels/vhost/%2F/{name}/restart", "DELETE")[0] == 204
    assert api(base, "/shovels/vhost/%2F/nope/restart", "DELETE")[0] == 404
    assert api(base, path, "DELETE")[0] == 204
    assert api(base, path, "DELETE")[0] == 404


def test_destination_nack_requeues_at_the_source(management_broker, unique_name):
    """The destination refuses publishes (x-overflow reject-publish: Basic.Nack): the shovel
    nacks those source messages (requeued there) and keeps running, as RabbitMQ's does
    (rabbit_amqp091_shovel ``handle_dest`` basic.nack); once there is room they move. A
    reconnect-delay of an hour: a shovel that ended on the nack would not move them."""
    b = management_broker
    base, name = b.api_url, unique_name
    src, dest = f"{name}.src", f"{name}.dest"
    conn = pika.BlockingConnection(pika.URLParameters(b.uri))
    try:
        ch = conn.channel()
        ch.queue_declare(src, durable=True)
        ch.queue_declare(dest, durable=True, arguments={"x-max-length": 3,
                                                        "x-overflow": "reject-publish"})
        for i in range(5):
            ch.basic_publish("", src, str(i).encode(), pika.BasicProperties(delivery_mode=2))
        path = f"/parameters/shovel/%2F/{name}"
        value = {"src-uri": "amqp://", "src-queue": src, "dest-uri": "amqp://",
                 "dest-queue": dest, "reconnect-delay": 3600}
        assert api(base, path, "PUT", {"value": value})[0] == 201
        try:
            def count(queue: str) -> int:
                return ch.queue_declare(queue, passive=True).method.message_count

            eventually(lambda: count(dest) == 3, "3 of 5 moved, the destination full")
            assert ch.queue_purge(dest).method.message_count == 3
            eventually(lambda: count(dest) == 2 and count(src) == 0,
                       "the 2 refused ones moved once there was room")
            bodies = sorted(ch.basic_get(dest, auto_ack=True)[2] for _ in range(2))
            assert bodies == [b"3", b"4"]
            states = [s["state"] for s in api(base, "/shovels")[1] if s["name"] == name]
            assert states == ["running"]
        finally:
            assert api(base, path, "DELETE")[0] == 204
            ch.queue_delete(src)
            ch.queue_delete(dest)
    finally:
        conn.close()


def _http_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_ours(data_dir: Path, http: int, port: int | None = None):
    b = start_broker(data_dir, "--management-port", str(http), port=port)
    b.api_url = f"http://127.0.0.1:{http}"
    eventually(lambda: api(b.api_url, "/overview")[0] == 200, "our management API")
    return b


def _publish(uri: str, queue: str, n: int) -> None:
    with BlockingConnection(uri) as conn:
        ch = conn.channel(confirm=True)
        ch.queue_declare(queue, durable=True)
        ch.publish_many((str(i).encode().ljust(64, b".") for i in range(n)), "", queue,
                        Properties(delivery_mode=2), batch=500)


def _count(uri: str, queue: str) -> int:
    with BlockingConnection(uri) as conn:
        return conn.channel().queue_declare(queue, passive=True).message_count


def _drain(uri: str, queue: str) -> Counter:
    """Every message body of ``queue`` (consumed, no-ack) as a count per message number."""
    bodies: Counter = Counter()
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        for method, _props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=2):
            if method is None:   # nothing for 2 s: the queue is empty (none in flight now)
                break
            bodies[int(body.rstrip(b"."))] += 1
    finally:
        conn.close()
    return bodies


def _both_ways_with_kill(tmp_path: Path, rabbit_uri: str, name: str) -> None:
    """Two shovels run by one broker of ours, RabbitMQ -> ours and ours -> RabbitMQ; that
    broker is SIGKILLed when both are moving and started again on the same data."""
    http = _http_port()
    ours = _start_ours(tmp_path / "ours", http)
    ways = {"in": (rabbit_uri, "amqp://"), "out": ("amqp://", rabbit_uri)}

    def amqp(uri: str) -> str:
        return ours.uri if uri == "amqp://" else uri

    try:
        for way, (src_uri, dest_uri) in ways.items():
            _publish(amqp(src_uri), f"{name}.{way}.src", N_MESSAGES)
            with BlockingConnection(amqp(dest_uri)) as conn:
                conn.channel().queue_declare(f"{name}.{way}.dest", durable=True)
        for way, (src_uri, dest_uri) in ways.items():
            value = {"src-uri": src_uri, "src-queue": f"{name}.{way}.src", "dest-uri": dest_uri,
                     "dest-queue": f"{name}.{way}.dest", "ack-mode": "on-confirm",
                     "reconnect-delay": 1, "src-prefetch-count": 100}
            assert api(ours.api_url, f"/parameters/shovel/%2F/{way}", "PUT",
                       {"value": value})[0] == 201
        for way, (_, dest_uri) in ways.items():
            eventually(lambda: _count(amqp(dest_uri), f"{name}.{way}.dest")  # noqa: B023
                       >= N_MESSAGES // 10, f"some moved {way}", timeout=60)
        ours.kill()   # SIGKILL while both move: the shovels run in this process
        ours = _start_ours(tmp_path / "ours", http, port=ours.port)
        for way, (src_uri, dest_uri) in ways.items():
            eventually(lambda: _count(amqp(src_uri), f"{name}.{way}.src") == 0  # noqa: B023
                       and _count(amqp(dest_uri), f"{name}.{way}.dest")  # noqa: B023
                       >= N_MESSAGES, f"every message moved {way}", timeout=120)
        for way, (_, dest_uri) in ways.items():
            assert api(ours.api_url, f"/parameters/shovel/%2F/{way}", "DELETE")[0] == 204
            bodies = _drain(amqp(dest_uri), f"{name}.{way}.dest")
            duplicates = sum(bodies.values()) - len(bodies)
            print(f"shovel {'RabbitMQ -> ours' if way == 'in' else 'ours -> RabbitMQ'}: "
                  f"{N_MESSAGES} messages, {duplicates} duplicates after a SIGKILL")
            assert sorted(bodies) == list(range(N_MESSAGES)), way   # none lost
    finally:
        ours.stop()


@pytest.mark.timeout(300)   # two starts of our broker: slow on a loaded machine
def test_shovels_both_ways_survive_sigkill(rabbitmq, tmp_path, unique_name):
    _both_ways_with_kill(tmp_path, rabbitmq.uri, unique_name)


def test_ctl_parameters_and_definitions(management_broker, unique_name, tmp_path):
    b = management_broker
    skip_if_rabbitmq(b, "amqp-broker ctl and our definitions file (rabbitmqctl's are its own)")
    value = {"src-uri": "amqp://", "src-queue": f"{unique_name}.s", "dest-uri": "amqp://",
             "dest-queue": f"{unique_name}.d"}
    out = ctl(tmp_path, "--url", b.api_url, "set_parameter", "shovel", unique_name,
              json.dumps(value))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f'Setting runtime parameter "{unique_name}" for component '
                                 '"shovel" to ')
    listed = ctl(tmp_path, "--url", b.api_url, "list_parameters").stdout.splitlines()
    assert f"shovel\t{unique_name}\t{json.dumps(value, separators=(',', ':'))}" in listed
    status = eventually(lambda: [line for line in ctl(
        tmp_path, "--url", b.api_url, "shovel_status").stdout.splitlines()
        if line.startswith(f"{unique_name}\t/\tdynamic\trunning\t")], "shovel_status running")
    assert status
    bad = ctl(tmp_path, "--url", b.api_url, "set_parameter", "shovel", "x", '{"src-uri": 1}')
    assert bad.returncode == 1 and 'Key "dest-uri" not found in x' in bad.stderr
    # the definitions carry it: cleared, then imported back from the export
    defs = api(b.api_url, "/definitions")[1]
    mine = {"value": value, "vhost": "/", "component": "shovel", "name": unique_name}
    assert mine in defs["parameters"]
    out = ctl(tmp_path, "--url", b.api_url, "clear_parameter", "shovel", unique_name)
    assert out.returncode == 0, out.stderr
    assert api(b.api_url, f"/parameters/shovel/%2F/{unique_name}")[0] == 404
    assert api(b.api_url, "/definitions", "POST", {"parameters": [mine]})[0] == 204
    assert api(b.api_url, f"/parameters/shovel/%2F/{unique_name}") == (200, mine)
    assert api(b.api_url, f"/parameters/shovel/%2F/{unique_name}", "DELETE")[0] == 204
