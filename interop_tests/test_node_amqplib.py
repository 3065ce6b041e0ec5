"""Interop with Node's ``amqplib`` (the most used JavaScript AMQP 0-9-1 client).

Each test runs one small script from ``interop_tests/node/`` as
``node <script>.js <uri> <names...>``; the script prints a single JSON line
that the test asserts on.  Every script has its own 30 s deadline and the
subprocess call has a 60 s timeout, so nothing here can hang.

Covered (behaviour validated against RabbitMQ 3.10):

(a) ``roundtrip.js``: assertExchange(topic) / assertQueue / bindQueue with a
    ``*`` pattern / publish N messages with properties and headers / consume
    with manual ack; a non-matching routing key is not delivered.
(b) ``confirms.js``: confirm channel, 1,000 publishes, ``waitForConfirms``;
    every publish acked, none nacked, all in the queue.
(c) ``nack_requeue.js``: prefetch(1) is honoured and ``nack(requeue=true)``
    brings the message back first with ``fields.redelivered === true``
    (AMQP 0-9-1 Basic.Nack / Basic.Reject "requeue", redelivered flag).
(d) ``channel_error.js``: ``checkQueue`` (passive Queue.Declare) of a missing
    queue fails with channel-level 404 NOT_FOUND; the connection survives and
    a new channel on it works.
(e) ``get.js``: Basic.Get on an empty queue (Get-Empty -> ``false``), then
    message-count, ack, noAck, reject-requeue and redelivered on Get-Ok.

The scripts need ``node`` and ``interop_tests/node/node_modules/amqplib``
(installed by ``interop_tests/setup.sh``); the tests skip otherwise.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parent / "node"
NODE = shutil.which("node") or shutil.which("nodejs")

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(NODE is None, reason="node is not installed (run interop_tests/setup.sh)"),
    pytest.mark.skipif(
        not (NODE_DIR / "node_modules" / "amqplib").is_dir(),
        reason="amqplib is not installed in interop_tests/node (run interop_tests/setup.sh)",
    ),
]


def _name(prefix: str) -> str:
    return f"interop-node-{prefix}-{uuid.uuid4().hex[:10]}"


def run_script(uri: str, script: str, *names: str, timeout: float = 60.0) -> dict:
    """Run ``node script uri names...`` and return its JSON result."""
    try:
        proc = subprocess.run(
            [NODE, str(NODE_DIR / script), uri, *names],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:  # pragma: no cover - failure path
        pytest.fail(f"{script} did not finish in {timeout} s: {exc.stdout!r} {exc.stderr!r}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, (
        f"{script} printed no JSON (rc={proc.returncode}): {proc.stdout!r} {proc.stderr!r}"
    )
    result = json.loads(lines[-1])
    assert result.get("ok") is True, (
        f"{script} failed (rc={proc.returncode}): {result} {proc.stderr}"
    )
    assert proc.returncode == 0, proc.stderr
    return result


def test_topic_roundtrip(broker):
    count = 200
    exchange, queue = _name("topic"), _name("q")
    r = run_script(broker.uri, "roundtrip.js", exchange, queue, str(count))
    assert r["declaredQueue"] == queue
    assert r["received"] == [f"msg-{i}" for i in range(count)], (
        "lost, duplicated or reordered messages"
    )
    assert r["redelivered"] == 0
    assert r["remainingAfter"] == 0, "non-matching routing key was routed to the queue"
    p = r["firstProps"]
    assert p["contentType"] == "text/plain"
    assert p["messageId"] == "id-0"
    assert p["correlationId"] == "corr-0"
    assert p["headers"] == {"idx": 0}
    assert p["routingKey"] == "interop.0.node"
    assert p["exchange"] == exchange


def test_confirm_channel_1000(broker):
    r = run_script(broker.uri, "confirms.js", _name("confirm"), "1000")
    assert r["acked"] == 1000
    assert r["nacked"] == 0
    assert r["messageCount"] == 1000


def test_prefetch_nack_requeue_redelivers(broker):
    r = run_script(broker.uri, "nack_requeue.js", _name("nack"))
    assert r["maxUnacked"] == 1, "prefetch(1) not honoured"
    assert r["deliveries"] == [
        {"body": "first", "redelivered": False},
        {"body": "first", "redelivered": True},
        {"body": "second", "redelivered": False},
    ]
    assert r["remaining"] == 0


def test_channel_error_404_then_new_channel_works(broker):
    r = run_script(broker.uri, "channel_error.js", _name("missing"), _name("good"))
    assert r["error"] is not None, "checkQueue on a missing queue succeeded"
    assert r["error"]["code"] == 404
    assert r["channelClosedEvent"] is True
    assert r["connectionError"] is None, "a channel error must not close the connection"
    assert r["afterErrorBody"] == "after-error"


def test_get_and_get_empty(broker):
    queue = _name("get")
    r = run_script(broker.uri, "get.js", queue)
    assert r["empty"] is False
    assert r["countBefore"] == 3
    assert r["m1"]["body"] == "g1" and r["m1"]["messageCount"] == 2
    assert r["m1"]["type"] == "t1"
    assert r["m1"]["routingKey"] == queue and r["m1"]["exchange"] == ""
    assert r["m2"]["body"] == "g2" and r["m2"]["messageCount"] == 1
    assert r["m3"]["body"] == "g3" and r["m3"]["messageCount"] == 0
    assert r["m3"]["redelivered"] is False
    assert r["m3again"]["body"] == "g3" and r["m3again"]["redelivered"] is True
    assert r["emptyAgain"] is False
