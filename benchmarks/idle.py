"""What idleness costs: ``python -m benchmarks.idle [--queues N] [--connections M] ...``.

Issue 14 ("Cost that grows with what is idle"): starts one broker process (``python -m
amqp_broker`` on a free 127.0.0.1 port, temp data dir, management off unless ``--management``), then

* **queues**: declares ``--queues`` idle queues (default 100,000; no messages, no consumers;
  ``--expires-ms`` gives them an x-expires) through one connection, pipelined in bounded batches
  of ``--batch`` Queue.Declare, closes that connection, waits ``--settle`` s, and measures the
  broker process's CPU over ``--seconds`` s (psutil ``cpu_times``, user + system) and its RSS
  growth per queue;
* **connections**: opens ``--connections`` idle connections (default 10,000; one channel each,
  heartbeat ``--heartbeat`` s, default 10) from this process on asyncio, answering the broker's
  heartbeats and sending its own every heartbeat/2 s as clients do (py-amqp, pika), at most
  ``--concurrency`` handshakes at a time; then the same CPU and RSS-per-connection figures.

``--broker-src DIR`` runs the broker from another source tree (``cwd`` there, so ``python -m
amqp_broker`` imports that copy; for before/after figures against an older commit). The file
descriptor limit of this process is raised to its hard limit (``resource.setrlimit``); the
broker inherits it. Prints one line per figure; ``--json`` prints them as one JSON object.
Everything started is stopped at the end (bounded waits). Not a test: figures vary with load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pamqp import commands as cmd
from pamqp import frame as pframe
from pamqp import heartbeat as pheartbeat

from .backlog import RawClient
from .processes import (
    HOST,
    REPO_ROOT,
    free_port,
    process_cpu_seconds,
    stop_process,
    tail,
    wait_for_port,
)

try:
    import psutil
except ImportError:  # pragma: no cover - psutil is a test dependency
    psutil = None

__all__ = ["main", "declare_queues", "open_idle_connections"]

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
HEARTBEAT = pframe.marshal(pheartbeat.Heartbeat(), 0)
_FRAME_HEAD = struct.Struct(">BHI")


def raise_fd_limit() -> int:
    """Raise this process's open-file limit to its hard limit; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# ------------------------------------------------------------------------------- the broker
class BrokerProcess:
    """``python -m amqp_broker`` started from ``src`` (cwd) with its data in ``workdir``."""

    def __init__(self, workdir: Path, src: Path, heartbeat: int,
                 management: bool = False) -> None:
        self.port = free_port()
        http = [str(free_port()), str(free_port())] if management else ["0", "0"]
        self.log_path = workdir / "broker.log"
        data = workdir / "data"
        data.mkdir()
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "amqp_broker", "--host", HOST, "--port", str(self.port),
             "--data-dir", str(data), "--log-level", "warning", "--heartbeat", str(heartbeat),
             "--management-port", http[0], "--prometheus-port", http[1]],
            cwd=src, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        try:
            wait_for_port(self.port, self.proc, 30, "broker")
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"{exc}\n{tail(self.log_path)}") from None
        self.ps = psutil.Process(self.proc.pid) if psutil else None

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the broker process so far."""
        value = process_cpu_seconds(self.ps)
        if value is None:
            raise RuntimeError(f"broker gone\n{tail(self.log_path)}")
        return value

    def rss(self) -> int:
        """Resident set size in bytes."""
        assert self.ps is not None
        return int(self.ps.memory_info().rss)

    def stop(self) -> None:
        """Stop it (SIGTERM, then SIGKILL; bounded)."""
        stop_process(self.proc)
        self._log.close()


def measure_cpu(broker: BrokerProcess, seconds: float) -> float:
    """Share of one core the broker used over ``seconds`` (0.01 = 1 %)."""
    c0, t0 = broker.cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    c1, t1 = broker.cpu_seconds(), time.monotonic()
    return (c1 - c0) / (t1 - t0)


def declare_queues(port: int, count: int, batch: int, expires_ms: int | None,
                   prefix: str = "idle") -> float:
    """Declare ``count`` queues ``{prefix}-{i}`` through one connection, ``batch`` Declares in
    flight at most; returns the seconds it took."""
    arguments = {"x-expires": expires_ms} if expires_ms else {}
    start = time.monotonic()
    conn = RawClient(port)
    try:
        done = 0
        while done < count:
            n = min(batch, count - done)
            conn.sock.sendall(b"".join(
                pframe.marshal(cmd.Queue.Declare(queue=f"{prefix}-{done + i}",
                                                 arguments=arguments), 1) for i in range(n)))
            for _ in range(n):
                conn.expect(cmd.Queue.DeclareOk)
            done += n
    finally:
        conn.close()
    return time.monotonic() - start


# ------------------------------------------------------------------ many idle connections
class _Idle(asyncio.Protocol):
    """One idle client connection: handshake with ``heartbeat``, one channel, then silence
    except heartbeats (``IdleClients`` sends them)."""

    def __init__(self, heartbeat: int, opened: asyncio.Future) -> None:
        self.heartbeat = heartbeat
        self.opened = opened
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.received_heartbeats = 0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(PROTOCOL_HEADER)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 7:
            size = _FRAME_HEAD.unpack_from(self.buf)[2]
            if len(self.buf) < size + 8:
                return
            consumed, _channel, value = pframe.unmarshal(self.buf)
            self.buf = self.buf[consumed:]
            self._frame(value)

    def _frame(self, value: object) -> None:
        t = self.transport
        assert t is not None
        if isinstance(value, pheartbeat.Heartbeat):
            self.received_heartbeats += 1
        elif isinstance(value, cmd.Connection.Start):
            t.write(pframe.marshal(cmd.Connection.StartOk(
                client_properties={"product": "benchmarks.idle"}, mechanism="PLAIN",
                response="\0guest\0guest", locale="en_US"), 0))
        elif isinstance(value, cmd.Connection.Tune):
            t.write(pframe.marshal(cmd.Connection.TuneOk(value.channel_max, value.frame_max,
                                                         self.heartbeat), 0)
                    + pframe.marshal(cmd.Connection.Open("/"), 0))
        elif isinstance(value, cmd.Connection.OpenOk):
            t.write(pframe.marshal(cmd.Channel.Open(), 1))
        elif isinstance(value, cmd.Channel.OpenOk):
            if not self.opened.done():
                self.opened.set_result(True)
        elif isinstance(value, cmd.Connection.Close):
            t.write(pframe.marshal(cmd.Connection.CloseOk(), 0))
            self.closed = True
            if not self.opened.done():
                self.opened.set_exception(RuntimeError(f"refused: {value.reply_text}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.opened.done():
            self.opened.set_exception(ConnectionError("connection lost in the handshake"))


async def open_idle_connections(port: int, count: int, heartbeat: int, concurrency: int,
                                conns: list[_Idle] | None = None) -> list[_Idle]:
    """Open ``count`` handshaken connections with one channel each (``concurrency`` at a time),
    appended to ``conns`` (a new list by default) as each opens; returns that list."""
    loop = asyncio.get_running_loop()
    gate = asyncio.Semaphore(concurrency)
    if conns is None:
        conns = []

    async def one() -> None:
        async with gate:
            opened = loop.create_future()
            proto = _Idle(heartbeat, opened)
            await loop.create_connection(lambda: proto, HOST, port)
            await asyncio.wait_for(opened, 60)
            conns.append(proto)

    await asyncio.gather(*(one() for _ in range(count)))
    return conns


async def _send_heartbeats(conns: list[_Idle], heartbeat: int, stop: asyncio.Event) -> None:
    """Every heartbeat/2 s each connection sends one heartbeat, spread over ten slices."""
    if not heartbeat:
        await stop.wait()
        return
    slices = 10
    step = heartbeat / 2 / slices
    i = 0
    while not stop.is_set():
        for proto in conns[i % slices::slices]:
            if proto.transport is not None and not proto.closed:
                proto.transport.write(HEARTBEAT)
        i += 1
        try:
            await asyncio.wait_for(stop.wait(), step)
        except TimeoutError:
            pass


async def _connections_case(broker: BrokerProcess, args: argparse.Namespace) -> dict:
    rss0 = broker.rss()
    t0 = time.monotonic()
    conns: list[_Idle] = []
    stop = asyncio.Event()
    # heartbeats from the first connection on: opening 10,000 takes longer than 2 intervals
    beats = asyncio.create_task(_send_heartbeats(conns, args.heartbeat, stop))
    await open_idle_connections(broker.port, args.connections, args.heartbeat,
                                args.concurrency, conns)
    opened_s = time.monotonic() - t0
    await asyncio.sleep(args.settle)
    rss1 = broker.rss()
    cpu = await asyncio.to_thread(measure_cpu, broker, args.seconds)
    lost = sum(1 for p in conns if p.closed)
    received = sum(p.received_heartbeats for p in conns)
    stop.set()
    await beats
    for p in conns:
        if p.transport is not None:
            p.transport.close()
    return {"connections": len(conns), "heartbeat_s": args.heartbeat,
            "open_s": round(opened_s, 1), "cpu_share": cpu,
            "rss_per_connection_kib": (rss1 - rss0) / len(conns) / 1024,
            "connections_closed_by_broker": lost, "heartbeats_received": received}


# --------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    """Run the cases asked for; prints the figures."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.idle", description=__doc__)
    ap.add_argument("--queues", type=int, default=100_000, help="idle queues (0: skip)")
    ap.add_argument("--connections", type=int, default=10_000, help="idle connections (0: skip)")
    ap.add_argument("--heartbeat", type=int, default=10, help="heartbeat of the connections, s")
    ap.add_argument("--expires-ms", type=int, default=None, help="x-expires of the idle queues")
    ap.add_argument("--batch", type=int, default=1000, help="Queue.Declare in flight at most")
    ap.add_argument("--concurrency", type=int, default=200, help="handshakes in flight at most")
    ap.add_argument("--seconds", type=float, default=20.0, help="CPU measuring time, s")
    ap.add_argument("--settle", type=float, default=3.0, help="wait before measuring, s")
    ap.add_argument("--broker-src", type=Path, default=REPO_ROOT,
                    help="source tree the broker runs from (cwd of python -m amqp_broker)")
    ap.add_argument("--management", action="store_true",
                    help="serve the management API and Prometheus endpoint (free ports) too")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep the brokers' data and logs in this (new) directory")
    args = ap.parse_args(argv)
    if psutil is None:
        print("psutil is needed", file=sys.stderr)
        return 2
    limit = raise_fd_limit()
    if args.connections + 100 > limit:
        print(f"open-file limit {limit} is too low for {args.connections} connections",
              file=sys.stderr)
        return 2
    results: dict = {"broker_src": str(args.broker_src)}
    with tempfile.TemporaryDirectory(prefix="idle-bench-") as tmp:
        root = Path(tmp) if args.keep is None else args.keep
        root.mkdir(parents=True, exist_ok=True)
        if args.queues:
            (root / "q").mkdir()
            broker = BrokerProcess(root / "q", args.broker_src, args.heartbeat,
                                   args.management)
            try:
                time.sleep(1.0)
                base_cpu = measure_cpu(broker, min(5.0, args.seconds))
                rss0 = broker.rss()
                took = declare_queues(broker.port, args.queues, args.batch, args.expires_ms)
                time.sleep(args.settle)
                rss1 = broker.rss()
                cpu = measure_cpu(broker, args.seconds)
                results["queues"] = {
                    "queues": args.queues, "expires_ms": args.expires_ms,
                    "declare_s": round(took, 1), "cpu_share_empty_broker": base_cpu,
                    "cpu_share": cpu, "rss_per_queue_kib": (rss1 - rss0) / args.queues / 1024}
            finally:
                broker.stop()
        if args.connections:
            (root / "c").mkdir()
            broker = BrokerProcess(root / "c", args.broker_src, args.heartbeat,
                                   args.management)
            try:
                time.sleep(1.0)
                results["connections"] = asyncio.run(_connections_case(broker, args))
            finally:
                broker.stop()
    if args.json:
        print(json.dumps(results))
    else:
        for case in ("queues", "connections"):
            if case in results:
                r = results[case]
                print(f"{case}: " + ", ".join(
                    f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
