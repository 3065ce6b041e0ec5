"""Federation (issue 27), as a user of RabbitMQ's ``rabbitmq_federation`` sees it.

Differential (``management_broker``: ours and the private RabbitMQ 3.10 node with its federation
plugins): the same ``federation-upstream`` / ``federation-upstream-set`` JSON is refused with
the same 400 texts and accepted with the same answers; a federated exchange whose upstream is
the same broker (``amqp://``) passes a message on with the same ``x-received-from`` hop, and
``/api/federation-links`` shows the link running with the same keys. Ours only: RabbitMQ as the
upstream of a federated exchange and a federated queue of ours; ours -> ours (an upstream set,
an exchange and a queue) where the upstream broker is SIGKILLed and started again: the links
go to ``error`` and come back ``running``, and messages flow again; ``ctl federation_status``.
"""

from __future__ import annotations

import re
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pika
import pytest

from interop_tests.conftest import start_broker
from interop_tests.test_management_ctl import ctl
from interop_tests.test_management_differential import api, eventually

pytestmark = pytest.mark.interop

#: (component, value, RabbitMQ 3.10's reason) for values it refuses (read from a 3.10 node)
REFUSED = [
    ("federation-upstream", {"exchange": "x"}, 'Key "uri" not found in {name}'),
    ("federation-upstream", {"uri": 5}, "uri should be list, actually was 5"),
    ("federation-upstream", {"uri": "foo://x"},
     '"foo://x" not a valid URI: {{unexpected_uri_scheme,"foo"},"foo://x"}'),
    ("federation-upstream", {"uri": "amqp://", "prefetch-count": "x", "ack-mode": "y",
                             "trust-user-id": 1, "max-hops": "z"},
     'ack-mode should be one of [&lt;&lt;"no-ack"&gt;&gt;,&lt;&lt;"on-publish"&gt;&gt;,'
     '&lt;&lt;"on-confirm"&gt;&gt;], actually was '
     '&lt;&lt;"y"&gt;&gt;\ntrust-user-id should be boolean, actually was 1\n'
     'max-hops should be a number, actually was &lt;&lt;"z"&gt;&gt;\n'
     'prefetch-count should be a number, actually was &lt;&lt;"x"&gt;&gt;'),
    ("federation-upstream", {"uri": "amqp://", "bogus": 1},
     'Unrecognised terms [{&lt;&lt;"bogus"&gt;&gt;,1}] in {name}'),
    ("federation-upstream-set", [{"prefetch-count": 1}], 'Key "upstream" not found in {name}'),
    ("federation-upstream-set", [{"upstream": 5}],
     "upstream should be binary, actually was 5"),
]


def test_federation_parameters_as_rabbitmq(management_broker, unique_name):
    base, name = management_broker.api_url, unique_name
    for component, value, reason in REFUSED:
        assert api(base, f"/parameters/{component}/%2F/{name}", "PUT", {"value": value}) == (
            400, {"error": "bad_request",
                  "reason": "Validation failed\n\n" + reason.replace("{name}", name) + "\n"}
        ), value
    value = {"uri": "amqp://127.0.0.1:1", "expires": 60000, "max-hops": 2,
             "ack-mode": "on-publish"}
    path = f"/parameters/federation-upstream/%2F/{name}"
    assert api(base, path, "PUT", {"value": value})[0] == 201
    assert api(base, path, "PUT", {"value": value})[0] == 204
    expected = {"value": value, "vhost": "/", "component": "federation-upstream",
                "name": name}
    assert api(base, path) == (200, expected)
    assert expected in api(base, "/parameters/federation-upstream")[1]
    set_path = f"/parameters/federation-upstream-set/%2F/{name}"
    members = [{"upstream": name, "prefetch-count": 10}]
    assert api(base, set_path, "PUT", {"value": members})[0] == 201
    assert api(base, set_path)[1]["value"] == members
    for p in (set_path, path):
        assert api(base, p, "DELETE")[0] == 204
        assert api(base, p)[0] == 404
    # a vhost's parameters go with it
    vhost = _short(unique_name)
    assert api(base, f"/vhosts/{vhost}", "PUT", {})[0] == 201
    assert api(base, f"/parameters/federation-upstream/{vhost}/{name}", "PUT",
               {"value": value})[0] == 201
    assert api(base, f"/vhosts/{vhost}", "DELETE")[0] == 204
    eventually(lambda: not [x for x in api(base, "/parameters")[1] if x["vhost"] == vhost],
               "the parameter gone with its vhost")


def _links(base: str, name: str, status: str = "running") -> list[dict] | None:
    mine = [x for x in api(base, "/federation-links")[1]
            if name in (x.get("exchange"), x.get("queue"))]
    return mine if mine and all(x["status"] == status for x in mine) else None


def _gone(base: str, name: str) -> bool:
    """True when no link of exchange or queue ``name`` is listed."""
    return not [x for x in api(base, "/federation-links")[1]
                if name in (x.get("exchange"), x.get("queue"))]


def _get(uri: str, queue: str):
    """basic_get of ``queue`` at ``uri``: (properties, body) or None."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        method, props, body = conn.channel().basic_get(queue, auto_ack=True)
        return (props, body) if method else None
    finally:
        conn.close()


def _declare(uri: str, exchange: str | None, queue: str | None = None, key: str = "k") -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        if exchange is not None:
            ch.exchange_declare(exchange, "direct", durable=True)
        if queue is not None:
            ch.queue_declare(queue, durable=True)
            if exchange is not None:
                ch.queue_bind(queue, exchange, key)
    finally:
        conn.close()


def _publish(uri: str, exchange: str, key: str, body: bytes) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        conn.channel().basic_publish(exchange, key, body, pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


def _federate(base: str, name: str, upstream: dict, pattern: str, apply_to: str,
              key: str = "federation-upstream") -> None:
    """An upstream ``name`` and a policy ``name`` giving it to what ``pattern`` matches."""
    assert api(base, f"/parameters/federation-upstream/%2F/{name}", "PUT",
               {"value": upstream})[0] in (201, 204)
    if key == "federation-upstream-set":
        assert api(base, f"/parameters/federation-upstream-set/%2F/{name}", "PUT",
                   {"value": [{"upstream": name}]})[0] in (201, 204)
    assert api(base, f"/policies/%2F/{name}", "PUT",
               {"pattern": pattern, "apply-to": apply_to, "definition": {key: name}})[0] in (
        201, 204)


def _unfederate(base: str, name: str) -> None:
    api(base, f"/policies/%2F/{name}", "DELETE")
    api(base, f"/parameters/federation-upstream-set/%2F/{name}", "DELETE")
    api(base, f"/parameters/federation-upstream/%2F/{name}", "DELETE")


def _short(unique_name: str) -> str:
    """A short unique name: the link's upstream queue and exchange names add to it (exchange
    names of our client, as pamqp's, are at most 127 characters)."""
    return "fed." + unique_name.rsplit(".", 1)[-1]


def test_federated_exchange_within_one_broker(management_broker, unique_name):
    b, name = management_broker, _short(unique_name)
    up, down, queue = f"{name}.up", f"{name}.down", f"{name}.q"
    _declare(b.uri, up)
    _declare(b.uri, down, queue)
    _federate(b.api_url, name, {"uri": "amqp://", "exchange": up},
              f"^{re.escape(down)}$", "exchanges")
    try:
        [link] = eventually(lambda: _links(b.api_url, down), "the link running")
        assert {k: link[k] for k in ("type", "vhost", "exchange", "upstream_exchange",
                                     "upstream", "status", "uri")} == {
            "type": "exchange", "vhost": "/", "exchange": down, "upstream_exchange": up,
            "upstream": name, "status": "running", "uri": "amqp://"}
        assert "local_connection" in link and "id" in link
        # RabbitMQ shows a link running once connected, before its bindings are made upstream:
        # publish until one comes through
        props, body = eventually(lambda: _publish(b.uri, up, "k", b"hello") or _get(b.uri, queue),
                                 "a message federated")
        assert body == b"hello" and props.delivery_mode == 2
        [upstream_queue] = [q["name"] for q in api(b.api_url, "/queues/%2F")[1]
                            if q["name"].startswith(f"federation: {up} -> ")]
        assert upstream_queue.endswith(f":{down}")
        [hop] = props.headers["x-received-from"]
        assert {k: hop.get(k) for k in ("uri", "exchange", "redelivered", "vhost")} == {
            "uri": "amqp://", "exchange": down, "redelivered": False, "vhost": "/"}, hop
        assert hop.get("cluster-name")
    finally:
        _unfederate(b.api_url, name)
    eventually(lambda: _gone(b.api_url, down), "the link gone with its policy")

    def upstream_queues() -> list[str]:
        return [q["name"] for q in api(b.api_url, "/queues/%2F")[1]
                if q["name"].startswith(f"federation: {up} -> ")]

    eventually(lambda: not upstream_queues(), "its upstream queue deleted")


# ------------------------------------------------------------------------- ours only
def _http_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_ours(data_dir: Path, node: str, http: int, port: int | None = None):
    b = start_broker(data_dir, "--management-port", str(http), "--node-name", node, port=port)
    b.api_url = f"http://127.0.0.1:{http}"
    eventually(lambda: api(b.api_url, "/overview")[0] == 200, "our management API")
    return b


def _consume(uri: str, queue: str, n: int) -> list:
    """Up to ``n`` (properties, body) from a consumer of ``queue`` (10 s without one: stop)."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    got = []
    try:
        ch = conn.channel()
        for method, props, body in ch.consume(queue, auto_ack=True, inactivity_timeout=10):
            if method is None:
                break
            got.append((props, body))
            if len(got) == n:
                break
        ch.cancel()
    finally:
        conn.close()
    return got


@pytest.mark.timeout(180)
def test_upstreams_rabbitmq_and_ours_survive_sigkill(rabbitmq, tmp_path, unique_name):
    """A downstream of ours with two upstreams: RabbitMQ (one upstream, exchange and queue) and
    a broker of ours (an upstream set, exchange and queue) that is SIGKILLed and restarted."""
    name, http = _short(unique_name), _http_port()
    with ThreadPoolExecutor(2) as pool:   # both start at once (each takes seconds)
        starting = [pool.submit(_start_ours, tmp_path / "up", "up@localhost", http),
                    pool.submit(_start_ours, tmp_path / "down", "down@localhost", _http_port())]
    started = [f.result() for f in starting if f.exception() is None]
    if len(started) < 2:   # one did not start: stop the other, then fail with the reason
        for b in started:
            b.stop()
        for f in starting:
            f.result()
    up, d = started
    rx, rq, ox, oq = (f"{name}.{s}" for s in ("rx", "rq", "ox", "oq"))
    try:
        # --- RabbitMQ -> ours: a federated exchange and a federated queue
        _declare(d.uri, rx, f"{rx}q")
        _declare(rabbitmq.uri, None, rq)
        for i in range(3):
            _publish(rabbitmq.uri, "", rq, f"queued {i}".encode())
        _federate(d.api_url, f"{name}.r", {"uri": rabbitmq.uri, "reconnect-delay": 1,
                                            "expires": 60000},
                  f"^{re.escape(name)}\\.r(x|q)$", "all")
        _declare(d.uri, None, rq)
        eventually(lambda: _links(d.api_url, rx) and _links(d.api_url, rq), "links running")
        _publish(rabbitmq.uri, rx, "k", b"from rabbitmq")
        props, body = eventually(lambda: _get(d.uri, f"{rx}q"), "the message federated")
        assert body == b"from rabbitmq"
        [hop] = props.headers["x-received-from"]
        assert hop["exchange"] == rx and hop["cluster-name"] not in ("", "down@localhost")
        # the federated queue pulls only while it has a consumer and nothing ready
        assert _get(d.uri, rq) is None
        assert [b for _, b in _consume(d.uri, rq, 3)] == [f"queued {i}".encode()
                                                          for i in range(3)]
        # --- ours -> ours through an upstream set, the upstream SIGKILLed and restarted
        _declare(up.uri, ox)
        _declare(d.uri, ox, f"{ox}q")
        _federate(d.api_url, f"{name}.o", {"uri": up.uri, "reconnect-delay": 0.5},
                  f"^{re.escape(name)}\\.o(x|q)$", "all", key="federation-upstream-set")
        _declare(d.uri, None, oq)
        eventually(lambda: _links(d.api_url, ox) and _links(d.api_url, oq), "links running")
        _publish(up.uri, ox, "k", b"before")
        assert eventually(lambda: _get(d.uri, f"{ox}q"), "federated before")[1] == b"before"
        up.kill()   # SIGKILL
        eventually(lambda: _links(d.api_url, ox, "error"), "the link in error")
        status = ctl(tmp_path, "--url", d.api_url, "federation_status", "--only-down")
        assert status.returncode == 0, status.stderr
        assert any(line.startswith(f"exchange\t/\t{ox}\t{ox}\t\t\t{name}.o\t")
                   and "\terror\t" in line for line in status.stdout.splitlines()), status.stdout
        assert f"\t{rx}\t" not in status.stdout   # running: not down
        up = _start_ours(tmp_path / "up", "up@localhost", http, port=up.port)
        _publish(up.uri, "", oq, b"queued upstream")   # for the federated queue
        eventually(lambda: _links(d.api_url, ox), "the link running again", timeout=60)
        _publish(up.uri, ox, "k", b"after")

        def past_redeliveries():
            # at least once: when the SIGKILL came between the downstream's confirm of "before"
            # and the link's ack reaching the upstream, the restarted upstream delivers "before"
            # again (as RabbitMQ's federation does); nothing else may come before "after"
            got = _get(d.uri, f"{ox}q")
            while got is not None and got[1] == b"before":
                got = _get(d.uri, f"{ox}q")
            return got

        assert eventually(past_redeliveries, "federated after")[1] == b"after"
        assert _get(d.uri, f"{ox}q") is None   # "after" once
        [(props, body)] = _consume(d.uri, oq, 1)
        assert body == b"queued upstream" and props.headers["x-received-from"][0]["queue"] == oq
        # the links from RabbitMQ stopped (their policy gone), then the broker: it stops
        # without a SIGKILL (a cancelled link's connections close at once, they do not wait
        # for a Close-Ok that cannot come)
        api(d.api_url, f"/policies/%2F/{name}.r", "DELETE")
        eventually(lambda: _gone(d.api_url, rx), "the link from RabbitMQ gone")
        assert d.stop() == 0
    finally:
        d.stop()
        up.stop()
