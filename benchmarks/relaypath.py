"""The cluster relay's path in one process, for ``valgrind --tool=callgrind`` (issue 10: CPU per
relayed message against a local one): ``python -m benchmarks.relaypath [--messages N]
[--callgrind]``.

Two core ``Broker`` objects, A and B (no sockets: ``amqp_broker.core``), with the real cluster code
between them where it is not I/O: a publisher on A publishes 1 KiB messages (frames as amqbench
sends them, chunks of 100) to shared queue ``hot``, whose only consumer is B's (a relay consumer on
A, ``core.relay``); ``ClusterDriver.relay`` adds each transfer to the Cluster.RelayBatch open for
B (``core.relay_batch``), encoded as the peer link's writer would write it once the chunk is
dealt (``cluster.relay_wire.encode_batch``); the bytes are fed to B's peer connection (an AMQP
connection marked as a member's, as after the cluster-peer handshake), whose ``ClusterDriver``
hands the relays to B's consumer; that consumer acks every 100 deliveries with one Basic.Ack
multiple; B's settles (one Basic.Ack multiple per batch on the peer channel) are read back as
the peer link's reader reads them (``cluster.links``: frame splitter, settle decoder, one batch
per read) and applied on A (``core.relay.settle_batch``).

Compare with ``python -m benchmarks.hotpath --case ack --callgrind`` (the same publisher and
consumer on one broker). ``--callgrind`` runs itself under callgrind at N and 2N messages and
prints the difference over N: instructions per relayed message, both brokers together.
"""

from __future__ import annotations

import argparse
import time

from pamqp import commands, frame

from benchmarks.hotpath import CHUNK, _frames, callgrind


def run(messages: int) -> float:
    """Relay ``messages`` 1 KiB messages from A to B's consumer and settle them; returns s."""
    from amqp_broker.core import relay
    from amqp_broker.protocol import constants as c
    from amqp_broker.protocol.framing import FrameSplitter
    from cluster.links import _decode_settle
    from cluster.tests.relay_pair import relay_pair

    a, _b, pub, peer, con, links = relay_pair("hot")
    con.call(1, commands.Basic.Qos(prefetch_count=1000))
    con.consume(1, "hot", "c")
    chunk = _frames("hot", b"x" * 1024, False) * CHUNK
    splitter = FrameSplitter()
    delivered = 0
    started = time.perf_counter()
    for _ in range(messages // CHUNK):
        pub.conn.receive_data(chunk)
        a.run_dispatch()
        peer.conn.receive_data(links.take())
        out = con.conn.take_output()
        while out:   # as the I/O layer does after each write (and benchmarks.hotpath)
            con.conn.output_drained()
            out = con.conn.take_output()
        # the consumer channel's last delivery tag (counting Deliver frames in the output cost
        # ~2,600 instructions per message, which the local hotpath case does not pay)
        delivered = con.conn.channels[1].next_delivery_tag - 1
        con.conn.receive_data(frame.marshal(commands.Basic.Ack(delivered, True), 1))
        batch = []
        for ftype, _channel, payload in splitter.feed(peer.conn.take_output()):
            settle = _decode_settle(payload) if ftype == c.FRAME_METHOD else None
            if settle is not None:
                batch.append(settle)
        if relay.settle_batch(a, "B", batch):
            a.run_dispatch()
    elapsed = time.perf_counter() - started
    if delivered < messages:
        raise SystemExit(f"only {delivered} of {messages} delivered")
    if a.relay_outbox.unsettled("B"):
        raise SystemExit(f"{a.relay_outbox.unsettled('B')} transfers not settled")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--callgrind", action="store_true")
    args = parser.parse_args()
    if args.callgrind:
        per = callgrind(args.messages, "relay", module="benchmarks.relaypath")
        print(f"relayed: {per:,.0f} instructions per 1 KiB message (both brokers)")
    else:
        seconds = run(args.messages)
        print(f"relayed: {args.messages / seconds:,.0f} msg/s in-process ({seconds:.2f} s)")


if __name__ == "__main__":
    main()
