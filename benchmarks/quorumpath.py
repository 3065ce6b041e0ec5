"""A quorum queue's path through three brokers in one process, for ``valgrind --tool=callgrind``
(issue 12: CPU per message of a Raft-replicated queue): ``python -m benchmarks.quorumpath
[--messages N] [--callgrind [--keep PREFIX]] [--profile]``.

Three core ``Broker`` objects A, B and C (no sockets: ``amqp_broker.core``), each with the real
quorum runtime (``amqp_broker.clustering.quorum``: the Raft core ``cluster.raft``, the state
machine ``cluster.quorum``, a ``DiskLog`` with fsync in a temporary directory). Only the peer
links' sockets are replaced: what a runtime's ``send_raw`` would write to member X is kept and fed,
as one read per link per round, to X's peer connection from that member (an AMQP connection
marked as a member's, as after the cluster-peer handshake), where the real Cluster.Quorum
decoding, the Raft codec and the runtime take it. One quorum queue ``q`` of group A, B, C, whose
leader is A (elected first, on a clock moved for A only). As in ``benchmarks.quorum`` (and its
RabbitMQ run: publisher on the second node, consumer on the third): a publisher with confirms on
B publishes 1 KiB persistent messages in batches of 64 (frames as amqbench sends them), a
consumer on C (prefetch 1000) acks each batch with one Basic.Ack multiple.

After each batch the three brokers run until nothing moves (bounded): each round delivers every
link's bytes, then each runtime's group commit (``QuorumRuntime.sync_round``: write, fdatasync,
``persisted``). So a batch is one Raft round trip, as when the publisher waits for its confirms
(a window of 64; a real broker under load may batch more). The check at the end: every message
confirmed to the publisher, delivered to the consumer and settled in every replica.

``--callgrind`` runs itself under callgrind at N and 2N messages and prints the difference over
N: instructions per message, the three brokers together (start-up, the election and the declare
cancel out); with ``--keep PREFIX`` it keeps both outputs and prints the instructions per message
of the top functions (``callgrind_annotate`` self counts, 2N run minus N run: compiled functions
by their C names, the interpreter's own functions for Python code). ``--profile``: cProfile's
self time by Python module, for the Python-level picture.
"""

from __future__ import annotations

import argparse
import re
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.hotpath import _frames

NAMES = ("A", "B", "C")
BATCH = 64
PREFETCH = 1000
_MAX_ROUNDS = 1000   # rounds of the three brokers per batch before giving up
_ACK = b"\x00\x3c\x00\x50"       # Basic.Ack method (class 60, method 80)
_DELIVER = b"\x00\x3c\x00\x3c"   # Basic.Deliver method (class 60, method 60)
_TAG = struct.Struct(">Q")


class _Wire:
    """The peer links of the three brokers: the bytes each sent to each other, per (from, to)."""

    def __init__(self) -> None:
        self.queued: dict[tuple[str, str], list[bytes]] = {
            (a, b): [] for a in NAMES for b in NAMES if a != b}

    def links(self, me: str) -> Any:
        wire = self

        class Links:   # the runtime's view of its peer links (``cluster.links.PeerLinks``)
            def can_send(self, node: str, size: int) -> bool:
                return True

            def send_raw(self, node: str, data: bytes) -> None:
                wire.queued[(me, node)].append(data)

            def connect(self, node: str, address: str) -> None:
                raise AssertionError(f"link {me} -> {node} asked to reconnect")

        return Links()


class Cluster:
    """Brokers A, B, C with their quorum runtimes, wired by ``_Wire``; ``pump`` runs them."""

    def __init__(self, data_dir: Path, fsync: bool = True) -> None:
        from amqp_broker.clustering import quorum
        from amqp_broker.core.broker import Broker
        from amqp_broker.core.tests.client import Client

        self.wire = _Wire()
        self.clock = {n: 1000.0 for n in NAMES}   # s, per broker (the election moves A's)
        self.brokers = {n: Broker() for n in NAMES}
        self.runtimes = {}
        self.peers: dict[tuple[str, str], Any] = {}   # (from, to) -> to's connection from it
        members = [(n, f"127.0.0.{2 + i}:5672") for i, n in enumerate(NAMES)]
        for i, n in enumerate(NAMES):
            broker = self.brokers[n]
            rt = quorum.install(broker, data_dir / n, n, fsync=fsync)
            rt.clock = lambda n=n: self.clock[n]
            rt.group_commit = True
            rt.attach(self.wire.links(n), lambda: dict(members))
            rt.view_changed(1, members)
            broker.peer_handler = rt.on_peer_method
            self.runtimes[n] = rt
            for j, frm in enumerate(NAMES):
                if frm != n:
                    peer = Client(broker, f"127.0.0.{2 + j}", 40100 + 10 * i + j)
                    peer.handshake()
                    peer.open_channel(1)
                    peer.conn.peer_node = frm   # type: ignore[union-attr]
                    self.peers[(frm, n)] = peer

    def pump(self) -> int:
        """Run the brokers until no link carries bytes and no log waits for its sync; returns
        the rounds it took. Raises ``SystemExit`` after ``_MAX_ROUNDS``."""
        for rounds in range(_MAX_ROUNDS):
            moved = False
            for key, parts in self.wire.queued.items():
                if parts:
                    data = b"".join(parts)
                    parts.clear()
                    self.peers[key].conn.receive_data(data)
                    moved = True
            for rt in self.runtimes.values():
                moved = rt.sync_round() or moved
            if not moved:
                return rounds
        raise SystemExit(f"the brokers still exchange messages after {_MAX_ROUNDS} rounds")

    def elect(self, leader: str) -> None:
        """Make ``leader`` win the election: only its clock passes the election timeout."""
        self.clock[leader] += 10.0
        self.runtimes[leader].tick_all()
        self.pump()

    def replicas(self, uid: str) -> dict[str, Any]:
        """Each broker's ``QuorumGroup`` of group ``uid``."""
        return {n: rt.replicas[uid].raft for n, rt in self.runtimes.items()}


def run(messages: int, fsync: bool = True) -> float:
    """Publish ``messages`` 1 KiB persistent messages on B, consume and ack them on C, through a
    quorum queue led by A; returns seconds. Raises ``SystemExit`` when one is missing."""
    from pamqp import commands, frame

    from amqp_broker.core.tests.client import Client

    with tempfile.TemporaryDirectory(prefix="quorumpath-") as tmp:
        cluster = Cluster(Path(tmp), fsync=fsync)
        declare = Client(cluster.brokers["A"], "127.0.0.1", 40001)
        declare.handshake()
        declare.open_channel(1)
        declare.call(1, commands.Queue.Declare(queue="q", durable=True,
                                               arguments={"x-queue-type": "quorum"}))
        args = dict(cluster.brokers["A"].vhosts["/"].queues["q"].arguments)
        uid = args["x-quorum-group"]
        clients = {}
        for n in ("B", "C"):   # as the cluster's propagation of the declaration does
            cl = clients[n] = Client(cluster.brokers[n], "127.0.0.1", 40002)
            cl.handshake()
            cl.open_channel(1)
            cl.call(1, commands.Queue.Declare(queue="q", durable=True, arguments=args))
        cluster.elect("A")
        groups = cluster.replicas(uid)
        if not groups["A"].is_leader:
            raise SystemExit("A did not become the leader")
        pub, con = clients["B"], clients["C"]
        pub.call(1, commands.Confirm.Select())
        con.call(1, commands.Basic.Qos(prefetch_count=PREFETCH))
        con.consume(1, "q", "c")
        cluster.pump()
        con.conn.take_output()   # type: ignore[union-attr]
        chunk = _frames("q", b"x" * 1024, True) * BATCH
        confirmed = delivered = 0
        started = time.perf_counter()
        for _ in range(messages // BATCH):
            pub.conn.receive_data(chunk)   # type: ignore[union-attr]
            cluster.pump()
            out = pub.conn.take_output()   # type: ignore[union-attr]
            at = out.rfind(_ACK)
            if at >= 0:
                confirmed = _TAG.unpack_from(out, at + 4)[0]
            got = con.conn.take_output()   # type: ignore[union-attr]
            delivered += got.count(_DELIVER)
            con.conn.receive_data(frame.marshal(commands.Basic.Ack(delivered, True), 1))  # type: ignore[union-attr]
        cluster.pump()
        elapsed = time.perf_counter() - started
        total = messages // BATCH * BATCH
        if confirmed != total or delivered != total:
            raise SystemExit(f"{confirmed} confirmed, {delivered} delivered of {total}")
        for n, group in groups.items():
            fifo = group.machine.fifo
            held = sum(len(c.out) for c in fifo.consumers.values())
            if fifo.message_count() or held:
                raise SystemExit(f"{n}: {fifo.message_count()} ready, {held} unsettled")
        return elapsed


def callgrind(messages: int, keep: str | None = None) -> float:
    """Instructions per message: callgrind totals of this module at 2N and N messages, their
    difference over N. ``keep``: keep the two runs' output files as ``keep.1`` (N) and
    ``keep.2`` (2N), for ``breakdown``."""
    totals = []
    for run_no, n in ((1, messages), (2, 2 * messages)):
        with tempfile.TemporaryDirectory() as d:
            out = Path(f"{keep}.{run_no}") if keep else Path(d) / "cg.out"
            proc = subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                 sys.executable, "-m", "benchmarks.quorumpath", "--messages", str(n)],
                capture_output=True, text=True, timeout=7200)
            match = re.search(r"Collected : (\d+)", proc.stderr)
            if proc.returncode or not match:
                raise SystemExit(f"callgrind failed: {proc.stderr[-2000:]}")
            totals.append(int(match.group(1)))
    return (totals[1] - totals[0]) / messages


_LINE = re.compile(r"^\s*([\d,]+) \([\s\d.]+%\)\s+(\S.*?)(?: \[(.*)\])?$")


def _by_function(path: str) -> dict[str, int]:
    """Self instructions per function of a callgrind output (``callgrind_annotate``)."""
    text = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", path], capture_output=True,
                          text=True, check=True, timeout=600).stdout
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and "PROGRAM TOTALS" not in line:
            func = m.group(2).rpartition(":")[2].split("'")[0]   # recursion levels together
            out[func] = out.get(func, 0) + int(m.group(1).replace(",", ""))
    return out


def breakdown(keep: str, messages: int, top: int = 40) -> list[tuple[str, float]]:
    """The ``top`` functions by self instructions per message (2N run minus N run, over N) of
    the files ``callgrind(messages, keep)`` kept."""
    one, two = _by_function(f"{keep}.1"), _by_function(f"{keep}.2")
    diff = {k: (two.get(k, 0) - one.get(k, 0)) / messages for k in set(one) | set(two)}
    return sorted(diff.items(), key=lambda kv: -kv[1])[:top]


def profile(messages: int, top: int = 30) -> list[tuple[str, float, int]]:
    """cProfile of ``run``: (module, share of self time, calls per message), top ``top``
    (cProfile's overhead inflates Python-level calls: read it as shares)."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    run(messages)
    prof.disable()
    per: dict[str, list[float]] = {}
    for (file, _line, func), (_cc, calls, tt, _ct, _callers) in \
            pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        key = file if file != "~" else func
        root = str(Path(__file__).resolve().parent.parent)
        key = key.removeprefix(root + "/")
        acc = per.setdefault(key, [0.0, 0])
        acc[0] += tt
        acc[1] += calls
    total = sum(v[0] for v in per.values()) or 1.0
    rows = sorted(per.items(), key=lambda kv: -kv[1][0])[:top]
    return [(k, v[0] / total, round(v[1] / messages)) for k, v in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=6400)
    parser.add_argument("--callgrind", action="store_true")
    parser.add_argument("--keep", metavar="PREFIX",
                        help="with --callgrind: keep the outputs as PREFIX.1 / PREFIX.2 and "
                             "print the instructions per message of the top functions")
    parser.add_argument("--profile", action="store_true",
                        help="cProfile self time by module (Python functions)")
    parser.add_argument("--no-fsync", action="store_true", help="skip the logs' fdatasync")
    args = parser.parse_args()
    if args.callgrind:
        per = callgrind(args.messages, args.keep)
        print(f"quorum: {per:,.0f} instructions per 1 KiB message (three brokers)")
        if args.keep:
            for name, ir in breakdown(args.keep, args.messages):
                print(f"{ir:>10,.0f}  {name}")
    elif args.profile:
        for name, share, calls in profile(args.messages):
            print(f"{share:6.1%} {calls:>6}  {name}")
    else:
        seconds = run(args.messages, fsync=not args.no_fsync)
        print(f"quorum: {args.messages / seconds:,.0f} msg/s in-process ({seconds:.2f} s)")


if __name__ == "__main__":
    main()
