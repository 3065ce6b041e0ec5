"""The broker's hot path in one process, for ``valgrind --tool=callgrind`` (instructions per message
repeat across runs and machines, unlike time): ``python -m benchmarks.hotpath [--messages N]
[--case noack|ack|persistent|many] [--size BYTES] [--callgrind]``.

A core ``Broker`` (no sockets: ``amqp_broker.core``) with one publishing and one consuming
connection; the publisher's frames (Basic.Publish + header + body of ``--size`` bytes, default
1024, in body frames of at most frame_max 131072, as amqbench sends them) are fed to
``Connection.receive_data`` in chunks of 100 messages (fewer of bodies over 82 KiB: ``per_chunk``),
each chunk cut into reads of at most 256 KiB
(what the I/O layer's socket reads hand over: ``server.connection_io.READ_SIZE``), so a large
frame straddles two reads as it does on a socket. The consumer's output is taken after each chunk
(the bytes a socket write would carry; when output credit stopped deliveries, the I/O layer's
``output_drained`` lets them go on and the rest is taken too) and, for ``ack``, a Basic.Ack
multiple every 100 deliveries is fed back. ``persistent`` adds delivery-mode 2, a durable queue over a
message store in a temporary directory, publisher confirms and the store's sync. ``many``: 100
queues, 10 publishing and 10 consuming connections (``run_many``).

``--callgrind`` runs itself twice under callgrind (N and 2N messages) and prints the difference
divided by N: instructions per message (of ``--size`` bytes), free of start-up costs. Without it, prints msg/s of one
in-process run (a rough figure: it varies with the machine's load).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pamqp import body as pbody
from pamqp import commands, frame, header

CHUNK = 100
#: Bytes per simulated socket read (``amqp_broker.server.connection_io.READ_SIZE``).
READ_SIZE = 262144


#: Body bytes per body frame: frame_max 131072 less the 8 of the envelope (a longer body is cut).
FRAME_BODY_MAX = 131072 - 8
#: Body bytes per chunk at most: large bodies go fewer to a chunk (one of 1 MiB: 8 a chunk).
CHUNK_BYTES = 8 * 1024 * 1024


def _frames(routing_key: str, body: bytes, persistent: bool) -> bytes:
    props = commands.Basic.Properties(delivery_mode=2 if persistent else None)
    return b"".join([frame.marshal(commands.Basic.Publish(exchange="", routing_key=routing_key), 1),
                     frame.marshal(header.ContentHeader(0, len(body), props), 1),
                     *(frame.marshal(pbody.ContentBody(body[i:i + FRAME_BODY_MAX]), 1)
                       for i in range(0, len(body), FRAME_BODY_MAX))])


def per_chunk(size: int) -> int:
    """Messages of ``size`` body bytes fed per chunk: ``CHUNK`` (100), fewer for bodies over
    ``CHUNK_BYTES`` / 100 (82 KiB), at least 1."""
    return max(1, min(CHUNK, CHUNK_BYTES // max(size, 1)))


def _reads(data: bytes) -> list[bytes]:
    """``data`` cut into the pieces socket reads of ``READ_SIZE`` bytes would return."""
    return [data[i:i + READ_SIZE] for i in range(0, len(data), READ_SIZE)]


def run(messages: int, case: str, size: int = 1024) -> float:
    """Publish ``messages`` messages of ``size`` bytes through the core and consume them;
    returns seconds."""
    from amqp_broker.core.broker import Broker
    from amqp_broker.core.durability import Durability
    from amqp_broker.core.tests.client import Client

    durability = None
    tmp = None
    if case == "persistent":
        from queues.store.store import MessageStore

        tmp = tempfile.TemporaryDirectory(prefix="hotpath-")
        durability = Durability(MessageStore(Path(tmp.name) / "messages"))
    broker = Broker(durability=durability)
    pub = Client(broker, "127.0.0.1", 40001)
    pub.handshake()
    pub.open_channel(1)
    con = Client(broker, "127.0.0.1", 40002)
    con.handshake()
    con.open_channel(1)
    persistent = case == "persistent"
    pub.call(1, commands.Queue.Declare(queue="hot", durable=persistent))
    if persistent:
        pub.call(1, commands.Confirm.Select())
    con.call(1, commands.Basic.Qos(prefetch_count=1000))
    con.consume(1, "hot", "c", no_ack=(case == "noack"))
    channel = con.conn.channels[1]
    chunk = per_chunk(size)
    reads = _reads(_frames("hot", b"x" * size, persistent) * chunk)
    store = durability.store if durability is not None else None
    delivered = 0
    started = time.perf_counter()
    for _ in range(messages // chunk):
        for data in reads:
            pub.conn.receive_data(data)
        if store is not None:  # the group commit (in the I/O layer's worker thread normally)
            durability.begin_sync()  # type: ignore[union-attr]
            sync = store.flush()
            sync.run()
            durability.synced(store.synced(sync))  # type: ignore[union-attr]
            pub.conn.take_output()
        out = con.conn.take_output()
        while out:
            con.conn.output_drained()
            out = con.conn.take_output()
        delivered = channel.next_delivery_tag - 1
        if case != "noack":
            con.conn.receive_data(frame.marshal(commands.Basic.Ack(delivered, True), 1))
    elapsed = time.perf_counter() - started
    if delivered < messages:
        raise SystemExit(f"only {delivered} of {messages} delivered")
    if tmp is not None:
        tmp.cleanup()
    return elapsed


def run_many(messages: int, size: int = 1024, queues: int = 100, producers: int = 10,
             consumers: int = 10) -> float:
    """The "many queues" case in the core: ``producers`` publishing connections, each sending
    chunks of 100 messages round-robin over its share of ``queues`` queues (queue q belongs to
    producer q % producers, as ``benchmarks/manyqueues.c``), ``consumers`` consuming connections
    with no-ack consumers on their share; a chunk from every producer in turn, then every
    consumer's output is taken. Returns seconds."""
    from amqp_broker.core.broker import Broker
    from amqp_broker.core.tests.client import Client

    broker = Broker()
    pubs, cons = [], []
    for i in range(producers + consumers):
        client = Client(broker, "127.0.0.1", 40001 + i)
        client.handshake()
        client.open_channel(1)
        (pubs if i < producers else cons).append(client)
    names = [f"q{q}" for q in range(queues)]
    for name in names:
        pubs[0].call(1, commands.Queue.Declare(queue=name))
    for q, name in enumerate(names):
        consumer = cons[(q % producers + q // producers) % consumers]
        consumer.consume(1, name, f"c{q}", no_ack=True)
    body = b"x" * size
    chunks = []
    for p in range(producers):
        mine = names[p::producers]
        chunks.append(_reads(b"".join(_frames(mine[i % len(mine)], body, False)
                                      for i in range(CHUNK))))
    channels = [c.conn.channels[1] for c in cons]
    started = time.perf_counter()
    for _ in range(messages // (CHUNK * producers)):
        for p, reads in enumerate(chunks):
            for data in reads:
                pubs[p].conn.receive_data(data)
        for c in cons:
            while c.conn.take_output():
                c.conn.output_drained()
    elapsed = time.perf_counter() - started
    delivered = sum(ch.next_delivery_tag - 1 for ch in channels)
    if delivered < messages // (CHUNK * producers) * CHUNK * producers:
        raise SystemExit(f"only {delivered} of {messages} delivered")
    return elapsed


def callgrind(messages: int, case: str, module: str = "benchmarks.hotpath",
              size: int | None = None) -> float:
    """Instructions per message: callgrind totals at 2N and N messages, difference over N, of
    ``python -m module --messages N [--case case] [--size size]`` (``case`` "relay": no
    ``--case``). The runs get ``PYTHONHASHSEED=0`` unless it is set: with random string hashes
    the figure moves by up to ~1.5% from run to run (dict and set layouts), with a fixed seed
    by a few instructions."""
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    totals = []
    for n in (messages, 2 * messages):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "cg.out"
            proc = subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                 sys.executable, "-m", module, "--messages", str(n),
                 *(["--case", case] if case != "relay" else []),
                 *(["--size", str(size)] if size is not None else [])],
                capture_output=True, text=True, timeout=3600, env=env)
            match = re.search(r"Collected : (\d+)", proc.stderr)
            if proc.returncode or not match:
                raise SystemExit(f"callgrind failed: {proc.stderr[-2000:]}")
            totals.append(int(match.group(1)))
    return (totals[1] - totals[0]) / messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--case", choices=["noack", "ack", "persistent", "many"], default="noack",
                        help="many: 100 queues, 10 producing and 10 consuming connections, no-ack")
    parser.add_argument("--size", type=int, default=1024, help="body bytes (default 1024)")
    parser.add_argument("--callgrind", action="store_true")
    args = parser.parse_args()
    if args.callgrind:
        per = callgrind(args.messages, args.case, size=args.size)
        print(f"{args.case}: {per:,.0f} instructions per {args.size}-byte message")
    else:
        seconds = (run_many(args.messages, args.size) if args.case == "many"
                   else run(args.messages, args.case, args.size))
        print(f"{args.case}: {args.messages / seconds:,.0f} msg/s in-process ({seconds:.2f} s)")


if __name__ == "__main__":
    main()
