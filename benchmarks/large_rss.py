"""Memory while one large message passes: ``python -m benchmarks.large_rss [--size BYTES]
[--messages N] [--broker-src DIR] [--rabbitmq] [--json]``.

Issue 28 ("RSS while a 64 MiB message passes <= 2x its size above idle"): starts one broker
process (``python -m amqp_broker`` from ``--broker-src``, default this checkout, on a free
127.0.0.1 port, temp data dir, management off, ``--max-message-size`` set to the body size where
the tree has the setting), or
with ``--rabbitmq`` a private RabbitMQ node (``benchmarks.processes.RabbitMQ``, its
``max_message_size`` raised to fit). A pika consumer (no-ack) waits on a queue; after the broker
settles, its RSS is read (idle), then a pika publisher sends ``--messages`` transient messages of
``--size`` bytes (default 1 of 64 MiB) one after another, each consumed before the next is sent,
while a thread samples the broker's RSS every 2 ms (psutil; RabbitMQ: the node's process tree).
Prints idle RSS, peak RSS, peak - idle, and (peak - idle) / size; ``--json`` as one JSON object.
Not a test: figures vary with the machine's load and the allocator; compare in one sitting.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pika
import psutil

from benchmarks.processes import HOST, REPO_ROOT, RabbitMQ, free_port, stop_process, wait_for_port

MIB = 1024 * 1024


class Sampler(threading.Thread):
    """Samples the RSS (bytes) of ``procs`` (summed) every ``interval`` s until ``stop``."""

    def __init__(self, procs: list[psutil.Process], interval: float = 0.002) -> None:
        super().__init__(daemon=True)
        self.procs = procs
        self.interval = interval
        self.peak = 0
        self.done = threading.Event()

    def rss(self) -> int:
        total = 0
        for p in self.procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:
                pass
        return total

    def run(self) -> None:
        while not self.done.wait(self.interval):
            self.peak = max(self.peak, self.rss())


def measure(port: int, procs: list[psutil.Process], size: int, messages: int) -> dict:
    """Idle RSS, then the peak while ``messages`` bodies of ``size`` bytes pass one by one."""
    params = pika.ConnectionParameters(HOST, port, credentials=pika.PlainCredentials("guest",
                                                                                       "guest"))
    consumer = pika.BlockingConnection(params)
    publisher = pika.BlockingConnection(params)
    try:
        cch, pch = consumer.channel(), publisher.channel()
        cch.queue_declare("large-rss", auto_delete=True)
        time.sleep(1.0)
        sampler = Sampler(procs)
        idle = sampler.rss()
        sampler.start()
        body = bytes(size)
        started = time.perf_counter()
        for _ in range(messages):
            pch.basic_publish("", "large-rss", body)
            for method, _props, got in cch.consume("large-rss", auto_ack=True,
                                                   inactivity_timeout=120):
                if method is None:
                    raise SystemExit("no delivery within 120 s")
                if len(got) != size:
                    raise SystemExit(f"delivered {len(got)} bytes, sent {size}")
                break
            cch.cancel()
        seconds = time.perf_counter() - started
        sampler.done.set()
        sampler.join(5)
        peak = max(sampler.peak, idle)
        return {"size": size, "messages": messages, "idle_rss": idle, "peak_rss": peak,
                "above_idle": peak - idle, "ratio": (peak - idle) / size,
                "seconds_per_message": seconds / messages}
    finally:
        for conn in (publisher, consumer):
            try:
                conn.close()
            except Exception:
                pass


def main(argv: list[str] | None = None) -> int:
    """Run one measurement; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=64 * MIB, help="body bytes (default 64 MiB)")
    ap.add_argument("--messages", type=int, default=1, help="messages, one at a time (default 1)")
    ap.add_argument("--broker-src", type=Path, default=REPO_ROOT,
                    help="source tree to run our broker from (before/after figures)")
    ap.add_argument("--rabbitmq", action="store_true", help="measure a private RabbitMQ node")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="large-rss-") as tmp:
        if args.rabbitmq:
            node = RabbitMQ(conf=f"max_message_size = {max(args.size, 134217728)}\n")
            node.start()
            try:
                assert node.proc is not None
                root = psutil.Process(node.proc.pid)
                procs = [root, *root.children(recursive=True)]
                result = measure(node.port, procs, args.size, args.messages)
                result["broker"] = f"RabbitMQ {node.version}"
            finally:
                node.stop()
        else:
            port = free_port()
            cmd = [sys.executable, "-m", "amqp_broker", "--host", HOST, "--port", str(port),
                   "--data-dir", str(Path(tmp) / "data"), "--log-level", "warning",
                   "--management-port", "0", "--prometheus-port", "0"]
            if "max_message_size" in (args.broker_src / "amqp_broker" / "config.py").read_text():
                cmd += ["--max-message-size", str(max(args.size, 1))]  # older trees: no limit
            with open(Path(tmp) / "broker.log", "wb") as log:
                proc = subprocess.Popen(cmd, cwd=args.broker_src, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    wait_for_port(port, proc, 30, "our broker")
                    result = measure(port, [psutil.Process(proc.pid)], args.size, args.messages)
                    result["broker"] = f"ours ({args.broker_src})"
                finally:
                    stop_process(proc)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['broker']}: {result['messages']} x {result['size'] / MIB:g} MiB: idle "
              f"{result['idle_rss'] / MIB:.1f} MiB, peak {result['peak_rss'] / MIB:.1f} MiB, "
              f"above idle {result['above_idle'] / MIB:.1f} MiB = {result['ratio']:.2f}x the body "
              f"({result['seconds_per_message']:.2f} s a message)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
