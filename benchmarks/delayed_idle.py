"""What held delayed messages cost: ``python -m benchmarks.delayed_idle [--messages N] ...``.

Issue 25 ("timers from a heap, idle cost nothing (the idle benchmark at 1 million delayed
messages)"): starts one broker process (``benchmarks.idle.BrokerProcess``: ``python -m
amqp_broker`` on a free 127.0.0.1 port, temp data dir), declares an ``x-delayed-message``
exchange (``x-delayed-type`` direct) bound to one queue, publishes ``--messages`` messages
(default 1,000,000; ``--size`` bytes each, default 100) with ``x-delay`` spread over
``--spread-s`` seconds starting one hour from now (so none is due while measuring, and the heap
has many distinct deadlines), pipelined on one connection and ended by a synchronous method, then
measures the broker's CPU share over ``--seconds`` s (psutil, user + system) against the same
broker before the publishes, its RSS growth per held message, and how long a restart (SIGTERM,
start on the same data dir, ready) takes with them held. Prints one line per figure; ``--json``
one JSON object. Not a test: figures vary with load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pamqp import body as pbody
from pamqp import commands as cmd
from pamqp import frame as pframe
from pamqp import header as pheader

from .backlog import RawClient
from .idle import BrokerProcess, measure_cpu
from .processes import HOST, REPO_ROOT, free_port, psutil, tail, wait_for_port

EXCHANGE = "bench.delayed"
QUEUE = "bench.delayed.q"
HOUR_MS = 3_600_000


class DataDirBroker(BrokerProcess):
    """``BrokerProcess`` on an existing data directory ``data`` (logs in ``data/../broker-N``)."""

    def __init__(self, data: Path, src: Path) -> None:  # noqa: D107 - replaces the parent's
        self.port = free_port()
        data.mkdir(parents=True, exist_ok=True)
        self.log_path = data.parent / f"broker-{self.port}.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "amqp_broker", "--host", HOST, "--port", str(self.port),
             "--data-dir", str(data), "--log-level", "warning", "--management-port", "0",
             "--prometheus-port", "0"],
            cwd=src, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)
        try:
            wait_for_port(self.port, self.proc, 300, "broker")
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"{exc}\n{tail(self.log_path)}") from None
        self.ps = psutil.Process(self.proc.pid) if psutil else None


def hold_messages(port: int, count: int, size: int, spread_s: float, batch: int = 2000) -> float:
    """Publish ``count`` delayed messages (delays 1 h .. 1 h + ``spread_s``); returns seconds."""
    conn = RawClient(port)
    try:
        conn.send(1, cmd.Exchange.Declare(exchange=EXCHANGE, exchange_type="x-delayed-message",
                                          arguments={"x-delayed-type": "direct"}))
        conn.expect(cmd.Exchange.DeclareOk)
        conn.send(1, cmd.Queue.Declare(queue=QUEUE))
        conn.expect(cmd.Queue.DeclareOk)
        conn.send(1, cmd.Queue.Bind(queue=QUEUE, exchange=EXCHANGE, routing_key="k"))
        conn.expect(cmd.Queue.BindOk)
        body = b"x" * size
        step = max(1, int(spread_s * 1000) // max(1, count))
        start = time.monotonic()
        sent = 0
        while sent < count:
            n = min(batch, count - sent)
            frames = bytearray()
            for i in range(sent, sent + n):
                props = cmd.Basic.Properties(headers={"x-delay": HOUR_MS + (i * step) % int(
                    spread_s * 1000 + 1)})
                frames += pframe.marshal(cmd.Basic.Publish(exchange=EXCHANGE, routing_key="k"), 1)
                frames += pframe.marshal(pheader.ContentHeader(0, size, props), 1)
                frames += pframe.marshal(pbody.ContentBody(body), 1)
            conn.sock.sendall(frames)
            sent += n
            # a synchronous method after each batch: the broker has taken the batch before it
            conn.send(1, cmd.Exchange.Declare(exchange=EXCHANGE, passive=True))
            conn.expect(cmd.Exchange.DeclareOk)
        return time.monotonic() - start
    finally:
        conn.sock.close()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100, help="body bytes")
    ap.add_argument("--spread-s", type=float, default=3600.0,
                    help="delays spread over this many seconds after one hour")
    ap.add_argument("--seconds", type=float, default=10.0, help="CPU measuring window")
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--broker-src", type=Path, default=REPO_ROOT)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if psutil is None:
        print("psutil is needed", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="delayed-bench-"))
    results: dict = {"messages": args.messages, "size": args.size}
    data = tmp / "data"
    broker = DataDirBroker(data, args.broker_src)
    try:
        time.sleep(1.0)
        results["cpu_share_empty_broker"] = measure_cpu(broker, min(5.0, args.seconds))
        rss0 = broker.rss()
        results["publish_s"] = round(hold_messages(broker.port, args.messages, args.size,
                                                   args.spread_s), 1)
        time.sleep(args.settle)
        results["rss_per_held_message_b"] = round((broker.rss() - rss0) / args.messages)
        results["cpu_share_held"] = measure_cpu(broker, args.seconds)
        log_file = data / "delayed.log"
        results["log_bytes_per_message"] = round(log_file.stat().st_size / args.messages)
        broker.stop()
        start = time.monotonic()
        broker = DataDirBroker(data, args.broker_src)
        results["restart_s"] = round(time.monotonic() - start, 1)
        results["cpu_share_held_after_restart"] = measure_cpu(broker, args.seconds)
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(results))
    else:
        for key, value in results.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
