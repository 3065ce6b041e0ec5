"""Fuzzed frames never crash the broker nor disturb a well-behaved client.

Split out of ``test_bad_input.py``.  The hypothesis test fuzzes frames (valid
frames from ``BASE_FRAMES``, mutated: truncated, bit-flipped, wrong length
field, bytes inserted/deleted/appended; or random bytes) sent on raw TCP
sockets (``interop_tests/rawamqp.py``) after a valid handshake, while a pika
client publishes with confirms and consumes on another connection.  Each
fuzzed connection must end in a Connection.Close with a connection-error
reply code (AMQP 0-9-1 §2.3.7 / "Constants" in amqp0-9-1.xml: 501-506, 530,
540, 320) or, for RabbitMQ only, a dropped socket or 541 (its channel crashing
on a malformed header); every confirmed message
must be consumed exactly once and the pika client must see no error.
Every loop and wait is bounded in time.
"""

from __future__ import annotations

import collections
import os
import struct
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands
from pamqp import frame as pframe
from pamqp import header as pheader

from interop_tests.rawamqp import (
    CLOSE_TIMEOUT,
    CONNECTION_ERROR_CODES,
    assert_broker_alive,
    content_body,
    handshake,
    interop_name,
    is_rabbitmq,
    method_frame,
    publish,
    raw_frame,
)

pytestmark = pytest.mark.timeout(180)


FUZZ_BUDGET_S = 45.0  # stop doing real work after this (examples then pass trivially)


def _base_frames() -> list[bytes]:
    q = "interop-fuzz-q"
    return [
        method_frame(commands.Queue.Declare(queue=q, exclusive=True, auto_delete=True), 1),
        method_frame(
            commands.Queue.Declare(
                queue=q,
                exclusive=True,
                arguments={
                    "x-int": 7,
                    "x-str": "s",
                    "x-bool": True,
                    "x-list": [1, "a"],
                    "x-tab": {"k": 1.5},
                },
            ),
            1,
        ),
        method_frame(
            commands.Exchange.Declare(
                exchange="interop-fuzz-x", exchange_type="topic", auto_delete=True
            ),
            1,
        ),
        method_frame(commands.Queue.Bind(queue=q, exchange="amq.topic", routing_key="a.#"), 1),
        method_frame(commands.Basic.Qos(prefetch_count=10), 1),
        method_frame(commands.Basic.Consume(queue=q, consumer_tag="fz"), 1),
        method_frame(commands.Basic.Get(queue=q), 1),
        method_frame(commands.Basic.Ack(delivery_tag=1), 1),
        method_frame(commands.Basic.Reject(delivery_tag=1, requeue=True), 1),
        method_frame(commands.Confirm.Select(), 1),
        method_frame(commands.Tx.Select(), 1),
        method_frame(commands.Channel.Flow(active=True), 1),
        method_frame(commands.Channel.Open(), 2),
        method_frame(
            commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0), 1
        ),
        raw_frame(8, 0, b""),
        publish("interop-fuzz-q")
        + pframe.marshal(
            pheader.ContentHeader(
                0,
                5,
                commands.Basic.Properties(
                    content_type="text/plain", headers={"h": "v"}, delivery_mode=1, message_id="m"
                ),
            ),
            1,
        )
        + content_body(b"hello"),
    ]


BASE_FRAMES = _base_frames()


@st.composite
def mutated_frames(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(BASE_FRAMES)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(["truncate", "bitflip", "length", "byte", "insert", "delete", "append"])
        )
        if not data:
            data += draw(st.binary(min_size=1, max_size=16))
            continue
        pos = draw(st.integers(0, len(data) - 1))
        if kind == "truncate":
            del data[pos:]
        elif kind == "bitflip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "length" and len(data) >= 7:
            size = draw(
                st.one_of(
                    st.integers(0, 0xFFFFFFFF),
                    st.sampled_from(
                        [0, 1, 3, 4, len(data) - 8, len(data), 131064, 131072, 131073, 0x7FFFFFFF]
                    ),
                )
            )
            data[3:7] = struct.pack(">I", max(0, size) & 0xFFFFFFFF)
        elif kind == "byte":
            data[pos] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        else:
            data += draw(st.binary(min_size=1, max_size=32))
    return bytes(data)


FUZZ_INPUT = st.one_of(
    mutated_frames(),
    mutated_frames().map(lambda b: BASE_FRAMES[4] + b),  # after a valid frame
    st.binary(min_size=1, max_size=300),
)


class Traffic:
    """A well-behaved pika client: publish with confirms + consume, in threads."""

    def __init__(self, uri: str, max_seconds: float = 60.0, max_messages: int = 20000):
        self.uri = uri
        self.queue = interop_name("traffic")
        self.deadline = time.monotonic() + max_seconds
        self.max_messages = max_messages
        self.confirmed: list[str] = []
        self.received: list[str] = []
        self.errors: list[str] = []
        self.stop_publishing = threading.Event()
        self.publisher_done = threading.Event()
        self.ready = threading.Event()
        self.consumer = threading.Thread(target=self._consume, name="traffic-consumer", daemon=True)
        self.publisher = threading.Thread(
            target=self._publish, name="traffic-publisher", daemon=True
        )

    def start(self) -> None:
        self.consumer.start()
        if not self.ready.wait(15.0):
            self.errors.append("consumer not ready in 15 s")
        self.publisher.start()

    def _publish(self) -> None:
        import pika

        try:
            conn = pika.BlockingConnection(pika.URLParameters(self.uri))
            try:
                ch = conn.channel()
                ch.confirm_delivery()
                i = 0
                while (
                    not self.stop_publishing.is_set()
                    and time.monotonic() < self.deadline
                    and i < self.max_messages
                ):
                    mid = str(i)
                    # Raises (UnroutableError / NackError) unless confirmed.
                    ch.basic_publish(
                        "",
                        self.queue,
                        body=f"traffic-{mid}".encode(),
                        properties=pika.BasicProperties(message_id=mid),
                        mandatory=True,
                    )
                    self.confirmed.append(mid)
                    i += 1
                    time.sleep(0.002)
            finally:
                conn.close()
        except Exception as exc:  # noqa: BLE001 - recorded and asserted on
            self.errors.append(f"publisher: {exc!r}")
        finally:
            self.publisher_done.set()

    def _consume(self) -> None:
        import pika

        try:
            conn = pika.BlockingConnection(pika.URLParameters(self.uri))
            try:
                ch = conn.channel()
                ch.queue_declare(self.queue, auto_delete=False)
                ch.basic_qos(prefetch_count=50)

                def on_message(ch_, method, props, body):
                    self.received.append(props.message_id)
                    ch_.basic_ack(method.delivery_tag)

                ch.basic_consume(self.queue, on_message)
                self.ready.set()
                drain_deadline = None
                while time.monotonic() < self.deadline + 20.0:
                    conn.process_data_events(time_limit=0.1)
                    if self.publisher_done.is_set():
                        if drain_deadline is None:
                            drain_deadline = time.monotonic() + 15.0
                        if (
                            len(self.received) >= len(self.confirmed)
                            or time.monotonic() > drain_deadline
                        ):
                            break
                # Let any duplicate (which would be a bug) arrive.
                conn.process_data_events(time_limit=0.3)
                ch.queue_delete(self.queue)
            finally:
                conn.close()
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"consumer: {exc!r}")
            self.ready.set()

    def finish(self) -> None:
        self.stop_publishing.set()
        self.publisher.join(30.0)
        self.consumer.join(45.0)
        assert not self.publisher.is_alive(), "publisher thread did not stop"
        assert not self.consumer.is_alive(), "consumer thread did not stop"


def test_fuzz_frames_with_concurrent_client(broker):
    pytest.importorskip("pika")
    traffic = Traffic(broker.uri)
    traffic.start()
    started = time.monotonic()
    stats: collections.Counter = collections.Counter()

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=False,
        print_blob=True,
    )
    @given(data=FUZZ_INPUT)
    def one(data: bytes) -> None:
        if time.monotonic() - started > FUZZ_BUDGET_S:
            stats["skipped-over-budget"] += 1
            return
        with handshake(broker) as conn:
            rabbit = is_rabbitmq(conn)
            conn.send(data)
            # Flush: frame_max+16 zero octets complete any pending frame with a
            # bad frame-end (or form a type-0 frame), so a live server *must*
            # now answer -- a server that does not is hung.
            conn.send(b"\x00" * (conn.frame_max + 16))
            kind, code, text = conn.outcome(CLOSE_TIMEOUT)
            client_closed = any(isinstance(m, commands.Connection.CloseOk) for _, m in conn.seen)
            stats[f"{kind}:{code}"] += 1
            if os.environ.get("FUZZ_DEBUG") and kind == "eof":  # run with -s to see these
                print("EOF for", data[:60], conn.seen)
            assert kind != "open", (
                f"no answer within {CLOSE_TIMEOUT} s to {data!r} (seen {conn.seen})"
            )
            if kind == "close":
                # RabbitMQ 3.10 may also answer 541 INTERNAL_ERROR: its channel process crashes
                # decoding a malformed content header (a field table entry that runs past the
                # table), and whether it decodes it at all depends on timing (the concurrent
                # consumer); seen once in 200 examples in session 18's CI rehearsal. Ours must
                # never: a 541 from our broker is a bug of ours.
                allowed = CONNECTION_ERROR_CODES | {541} if rabbit else CONNECTION_ERROR_CODES
                assert code in allowed, (
                    f"unexpected reply code {code} {text!r} for {data!r}"
                )
            else:  # eof
                assert client_closed or rabbit, (
                    f"socket dropped without Connection.Close for {data!r}"
                )
        if sum(stats.values()) % 25 == 0:
            assert_broker_alive(broker)

    try:
        one()
    finally:
        traffic.finish()
    print(f"fuzz outcomes: {dict(stats)}; traffic confirmed={len(traffic.confirmed)}")
    assert_broker_alive(broker)
    assert traffic.errors == [], traffic.errors
    assert traffic.confirmed, "the concurrent client published nothing"
    counts = collections.Counter(traffic.received)
    dups = {m: c for m, c in counts.items() if c > 1}
    assert not dups, f"messages consumed more than once: {list(dups)[:10]}"
    missing = set(traffic.confirmed) - set(counts)
    assert not missing, (
        f"{len(missing)} confirmed messages never consumed, e.g. {sorted(missing)[:10]}"
    )
    assert set(counts) <= set(traffic.confirmed)
