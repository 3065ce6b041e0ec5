"""Replicated stream benchmark (issue 25): 3 brokers of ours on 127.0.0.2-4, one stream declared
on the first (replicated on all three), 1 KiB messages published with confirms (window 256) on the
second and consumed (prefetch 1000, multiple acks every 64, from "next") on the third; msg/s
confirmed and consumed. Then the same on one broker that is not clustered (a local stream) for the
cost of replication. ``--rabbitmq``: the same run against a 3-node RabbitMQ cluster on this
machine (``benchmarks.quorum.rabbitmq_throughput``, a stream declared on the first node, the
publisher on the second, the consumer on the third: RabbitMQ's streams over AMQP 0-9-1).

    python -m benchmarks.stream_cluster [--seconds 15] [--rabbitmq] [--append]

The clients are ``benchmarks.quorum``'s (our asyncio client, each in a process of its own, queue
``bench``). Figures depend on the machine being shared by the brokers and the clients: compare
ratios from one run. ``--append`` adds them to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.quorum import QUEUE, RESULTS, _spawn, rabbitmq_throughput
from cluster.tests.processes import Cluster, Member, free_port, wait_for

STREAM = {"x-queue-type": "stream"}


def _run(publish_on: Member, consume_on: Member, seconds: float) -> dict:
    consumer = _spawn("consume", consume_on.uri, seconds)
    time.sleep(1.0)   # attached at "next" before the first publish
    publisher = _spawn("publish", publish_on.uri, seconds)
    pub = json.loads(publisher.communicate(timeout=seconds + 120)[0])
    con = json.loads(consumer.communicate(timeout=seconds + 180)[0])
    return {"confirmed_per_s": pub["confirmed"] / pub["seconds"],
            "consumed_per_s": con["consumed"] / con["seconds"], "consumed": con["consumed"],
            "confirmed": pub["confirmed"]}


def _declare(member: Member) -> None:
    conn = member.connect()
    try:
        conn.channel().queue_declare(QUEUE, durable=True, arguments=STREAM)
    finally:
        conn.close()


def replicated(base: Path, seconds: float) -> dict:
    """Publisher on n3, consumer on n4, the stream replicated on n2-n4."""
    base.mkdir(parents=True, exist_ok=True)
    cluster = Cluster.create(base)
    try:
        n2, n3, n4 = cluster.start_three()
        _declare(n2)
        wait_for(lambda: "replica of group" in n4.log_path.read_text(errors="replace"), 30,
                 "n4 holds no replica")
        return _run(n3, n4, seconds)
    finally:
        cluster.stop_all()


def local(base: Path, seconds: float) -> dict:
    """Publisher and consumer on one broker that is not clustered."""
    base.mkdir(parents=True, exist_ok=True)
    cluster = Cluster.create(base)
    try:
        member = Member("n5", "127.0.0.5", free_port("127.0.0.5"), base / "n5", base / "n5.log")
        member.proc = subprocess.Popen(
            [sys.executable, "-m", "amqp_broker", "--host", member.host, "--port",
             str(member.port), "--data-dir", str(member.data_dir), "--log-level", "warning",
             "--management-port", "0", "--prometheus-port", "0"],
            stdout=open(member.log_path, "a"), stderr=subprocess.STDOUT)
        cluster.members["n5"] = member
        wait_for(member.serving, 30, "the broker did not start")
        _declare(member)
        return _run(member, member, seconds)
    finally:
        cluster.stop_all()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--append", action="store_true")
    p.add_argument("--rabbitmq", action="store_true", help="also a 3-node RabbitMQ cluster")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="stream-bench-") as tmp:
        rep = replicated(Path(tmp) / "cluster", args.seconds)
        print(f"replicated stream, 3 brokers: {rep['confirmed_per_s']:,.0f} msg/s confirmed, "
              f"{rep['consumed_per_s']:,.0f} msg/s consumed", flush=True)
        one = local(Path(tmp) / "local", args.seconds)
        print(f"local stream, 1 broker: {one['confirmed_per_s']:,.0f} msg/s confirmed, "
              f"{one['consumed_per_s']:,.0f} msg/s consumed", flush=True)
    rabbit = rabbitmq_throughput(args.seconds, STREAM) if args.rabbitmq else None
    if rabbit is not None:
        print(f"RabbitMQ {rabbit['version']} stream, 3 nodes: {rabbit['confirmed_per_s']:,.0f} "
              f"msg/s confirmed, {rabbit['consumed_per_s']:,.0f} msg/s consumed", flush=True)
    if args.append:
        with RESULTS.open("a") as f:
            f.write(f"\n## Replicated streams (issue 25), {time.strftime('%Y-%m-%d')}\n\n"
                    "`python -m benchmarks.stream_cluster` -- 1 KiB messages, confirms with a "
                    "window of 256 on one member, a consumer from `next` on another, our asyncio "
                    "client:\n\n| figure | confirmed | consumed |\n|---|---|---|\n"
                    f"| replicated on 3 brokers | {rep['confirmed_per_s']:,.0f} msg/s | "
                    f"{rep['consumed_per_s']:,.0f} msg/s |\n"
                    f"| local stream, 1 broker | {one['confirmed_per_s']:,.0f} msg/s | "
                    f"{one['consumed_per_s']:,.0f} msg/s |\n")
            if rabbit is not None:
                f.write(f"| RabbitMQ {rabbit['version']}, stream on 3 nodes | "
                        f"{rabbit['confirmed_per_s']:,.0f} msg/s | "
                        f"{rabbit['consumed_per_s']:,.0f} msg/s |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
