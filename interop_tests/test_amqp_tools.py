"""Interop with Debian's ``amqp-tools`` (the rabbitmq-c command-line clients).

Each tool is run as a subprocess with ``--url <broker uri>`` and a timeout.
Behaviour (output and exit status) was validated against RabbitMQ 3.10 with
amqp-tools 0.11 (Debian 12).

Covered:
- ``amqp-declare-queue -q NAME`` prints the queue name; ``-q ''`` prints a
  server-generated name; re-declaring with a different ``durable`` flag fails
  (406 PRECONDITION_FAILED, exit 1).
- ``amqp-publish -e '' -r q -b body`` then ``amqp-get -q q`` prints the body
  (exit 0); ``amqp-get`` on an empty queue exits 2, on a missing queue exits 1
  (channel error 404).
- ``amqp-publish -l`` publishes one message per stdin line with ``-C`` content
  type and ``-H`` headers (checked with pika on Basic.Get).
- ``amqp-consume -q q -c N cat`` runs ``cat`` once per message and stops after
  N messages; ``amqp-consume -e amq.direct -r key`` binds the queue and gets
  messages published afterwards.
- ``amqp-publish`` to a missing exchange exits 1 (404 on channel close).
- ``amqp-delete-queue -q q`` prints the number of messages deleted.

Skipped when the tools are not installed (see ``interop_tests/setup.sh``).
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import pytest

TOOLS = ["amqp-declare-queue", "amqp-publish", "amqp-get", "amqp-consume", "amqp-delete-queue"]

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        any(shutil.which(t) is None for t in TOOLS),
        reason="amqp-tools are not installed (run interop_tests/setup.sh)",
    ),
]

TIMEOUT = 20.0


def _name(prefix: str) -> str:
    return f"interop-tools-{prefix}-{uuid.uuid4().hex[:10]}"


def tool(broker, name: str, *args: str, stdin: str | None = None, timeout: float = TIMEOUT):
    """Run one amqp-tools command; return CompletedProcess (bytes stdout)."""
    return subprocess.run(
        [name, f"--url={broker.uri}", *args],
        input=stdin.encode() if stdin is not None else None,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
    )


def ok(proc) -> bytes:
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}: {proc.stderr!r}"
    return proc.stdout


@pytest.fixture
def queue(broker):
    name = _name("q")
    yield name
    # Best effort cleanup; the queue may already be gone.
    subprocess.run(
        ["amqp-delete-queue", f"--url={broker.uri}", "-q", name],
        capture_output=True,
        timeout=TIMEOUT,
    )


def test_declare_publish_get_delete(broker, queue):
    assert ok(tool(broker, "amqp-declare-queue", "-q", queue)).strip() == queue.encode()
    ok(tool(broker, "amqp-publish", "-e", "", "-r", queue, "-b", "hello body"))
    assert ok(tool(broker, "amqp-get", "-q", queue)) == b"hello body"
    # Empty queue: amqp-get exits 2 and prints nothing.
    empty = tool(broker, "amqp-get", "-q", queue)
    assert empty.returncode == 2, (empty.returncode, empty.stderr)
    assert empty.stdout == b""
    ok(tool(broker, "amqp-publish", "-e", "", "-r", queue, "-b", "one"))
    ok(tool(broker, "amqp-publish", "-e", "", "-r", queue, "-b", "two"))
    # amqp-delete-queue prints the number of messages that were in the queue.
    assert ok(tool(broker, "amqp-delete-queue", "-q", queue)).strip() == b"2"
    # The queue is gone: amqp-get gets a channel error 404 and exits 1.
    missing = tool(broker, "amqp-get", "-q", queue)
    assert missing.returncode == 1
    assert b"404" in missing.stderr


def test_server_named_queue(broker):
    out = ok(tool(broker, "amqp-declare-queue", "-q", "")).strip()
    assert out, "no server-generated queue name printed"
    assert b"\n" not in out
    ok(tool(broker, "amqp-delete-queue", "-q", out.decode()))


def test_redeclare_with_different_durable_fails_406(broker, queue):
    ok(tool(broker, "amqp-declare-queue", "-q", queue, "-d"))
    again = tool(broker, "amqp-declare-queue", "-q", queue)
    assert again.returncode == 1
    assert b"406" in again.stderr
    # The original (durable) declaration is still valid.
    assert ok(tool(broker, "amqp-declare-queue", "-q", queue, "-d")).strip() == queue.encode()


def test_consume_count_with_cat(broker, queue):
    n = 5
    ok(tool(broker, "amqp-declare-queue", "-q", queue))
    for i in range(n):
        ok(tool(broker, "amqp-publish", "-e", "", "-r", queue, "-b", f"m{i};"))
    out = ok(tool(broker, "amqp-consume", "-q", queue, "-c", str(n), "cat"))
    assert out == b"".join(f"m{i};".encode() for i in range(n))
    # All were acked: nothing is left.
    assert tool(broker, "amqp-get", "-q", queue).returncode == 2


def test_publish_lines_with_properties(broker, queue):
    pika = pytest.importorskip("pika")
    ok(tool(broker, "amqp-declare-queue", "-q", queue))
    ok(
        tool(
            broker,
            "amqp-publish",
            "-r",
            queue,
            "-l",
            "-C",
            "text/plain",
            "-H",
            "x-origin: amqp-tools",
            stdin="alpha\nbeta\ngamma\n",
        )
    )
    conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
    try:
        ch = conn.channel()
        bodies = []
        for _ in range(3):
            method, props, body = ch.basic_get(queue, auto_ack=True)
            assert method is not None, "a line was not published"
            assert props.content_type == "text/plain"
            assert props.headers == {"x-origin": "amqp-tools"}
            bodies.append(body)
        assert bodies == [b"alpha\n", b"beta\n", b"gamma\n"]  # -l keeps the newline
        assert ch.basic_get(queue, auto_ack=True)[0] is None
    finally:
        conn.close()


def test_consume_binds_to_exchange(broker, queue):
    pika = pytest.importorskip("pika")
    key = _name("key")
    # amqp-consume declares the queue itself (auto-delete) when -e is given.
    proc = subprocess.Popen(
        [
            "amqp-consume",
            f"--url={broker.uri}",
            "-q",
            queue,
            "-e",
            "amq.direct",
            "-r",
            key,
            "-c",
            "2",
            "cat",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        # Wait (bounded) until the consumer is attached, then publish.
        conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
        try:
            deadline = time.monotonic() + TIMEOUT
            while True:
                ch = conn.channel()
                try:
                    res = ch.queue_declare(queue, passive=True)
                    if res.method.consumer_count >= 1:
                        break
                    ch.close()
                except pika.exceptions.ChannelClosedByBroker:
                    pass  # not declared yet (404)
                assert proc.poll() is None, proc.communicate(timeout=5)
                assert time.monotonic() < deadline, "amqp-consume never attached"
                time.sleep(0.05)
        finally:
            conn.close()
        ok(tool(broker, "amqp-publish", "-e", "amq.direct", "-r", key, "-b", "via-exchange-1;"))
        ok(tool(broker, "amqp-publish", "-e", "amq.direct", "-r", "not-" + key, "-b", "wrong;"))
        ok(tool(broker, "amqp-publish", "-e", "amq.direct", "-r", key, "-b", "via-exchange-2;"))
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    assert proc.returncode == 0, err
    assert out == b"via-exchange-1;via-exchange-2;"


def test_publish_to_missing_exchange_fails_404(broker):
    res = tool(broker, "amqp-publish", "-e", _name("no-such-exchange"), "-r", "k", "-b", "x")
    assert res.returncode == 1
    assert b"404" in res.stderr
