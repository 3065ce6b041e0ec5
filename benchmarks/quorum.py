"""Quorum queue benchmark (issue 12): 3 brokers of ours on 127.0.0.2-4, one quorum queue, 1 KiB
persistent messages, publisher confirms with a window of 256 on one member, a consumer with
manual acks (prefetch 1000, multiple acks every 64) on another; msg/s confirmed and consumed.
Then failover: kill -9 of the queue leader's broker while a pika publisher on another member
publishes with confirms one at a time; the time from the kill to the next confirm (several
rounds, the killed broker restarted between them). Then memory: RSS growth of each broker per
ready message after a backlog is published with no consumer.

    python -m benchmarks.quorum [--seconds 15] [--failovers 3] [--backlog 20000] [--rabbitmq]
                                [--append]

``--append`` adds the figures to ``benchmarks/RESULTS.md``. The clients are our own asyncio client
(``clients.aio``), each in a process of its own. Figures depend on this 2-core machine being
shared by 3 brokers and the clients: compare ratios from one run. ``--rabbitmq``: the same
throughput run against a 3-node RabbitMQ cluster on this machine (three private nodes of
``benchmarks.processes.RabbitMQ``, distinct node names and ports, joined with
``rabbitmqctl join_cluster``; a quorum queue with ``x-quorum-initial-group-size: 3`` declared on
the first node), the same clients, the publisher on the second node and the consumer on the third.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from cluster.tests.processes import Cluster, wait_for
from cluster.tests.quorum_scenarios import Publisher, declare, message_count, wait_leader

QUEUE = "bench"
BODY = b"x" * 1024
WINDOW = 256
BATCH = 64
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


async def _publish(url: str, seconds: float) -> dict:
    from clients.aio import connect
    from clients.message import Properties

    props = Properties(delivery_mode=2)
    async with connect(url, reconnect=False, operation_timeout=60) as conn:
        ch = await conn.channel(confirm=True)
        pending: list[list] = []
        confirmed = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            pending.append(await ch.publish_batch([BODY] * BATCH, routing_key=QUEUE,
                                                  properties=props))
            while len(pending) * BATCH > WINDOW - BATCH:
                await ch.wait_confirmations(pending.pop(0))
                confirmed += BATCH
        for batch in pending:
            await ch.wait_confirmations(batch)
            confirmed += BATCH
        return {"confirmed": confirmed, "seconds": time.perf_counter() - t0}


async def _consume(url: str, seconds: float, quiet: float = 3.0) -> dict:
    from clients.aio import connect

    async with connect(url, reconnect=False, operation_timeout=60) as conn:
        ch = await conn.channel(prefetch=1000)
        consumer = await ch.basic_consume(QUEUE)
        count = 0
        t0 = time.perf_counter()
        last = t0
        it = consumer.__aiter__()
        while True:
            try:
                msg = await asyncio.wait_for(it.__anext__(), quiet)
            except (TimeoutError, StopAsyncIteration):
                break
            count += 1
            last = time.perf_counter()
            if count % 64 == 0:
                await msg.ack(multiple=True)
            if last - t0 > seconds + 60:
                break
        if count % 64:
            await msg.ack(multiple=True)
        await conn.drain()
        return {"consumed": count, "seconds": last - t0}


def _role(args: argparse.Namespace) -> int:
    fn = _publish if args.role == "publish" else _consume
    print(json.dumps(asyncio.run(fn(args.url, args.seconds))))
    return 0


def _spawn(role: str, url: str, seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchmarks.quorum", "--role", role,
                             "--url", url, "--seconds", str(seconds)],
                            stdout=subprocess.PIPE, text=True)


def throughput(cluster: Cluster, seconds: float) -> dict:
    n2, n3, n4 = cluster.start_three()
    declare(n2, QUEUE)
    leader = wait_leader(cluster, QUEUE)
    others = [m for m in (n2, n3, n4) if m is not leader]
    consumer = _spawn("consume", others[1].uri, seconds)
    time.sleep(1.0)
    publisher = _spawn("publish", others[0].uri, seconds)
    pub = json.loads(publisher.communicate(timeout=seconds + 120)[0])
    con = json.loads(consumer.communicate(timeout=seconds + 180)[0])
    return {"leader": leader.name, "publisher": others[0].name, "consumer": others[1].name,
            "confirmed_per_s": pub["confirmed"] / pub["seconds"], "confirmed": pub["confirmed"],
            "consumed": con["consumed"], "consumed_per_s": con["consumed"] / con["seconds"]}


def failovers(cluster: Cluster, rounds: int) -> list[float]:
    members = list(cluster.members.values())
    gaps = []
    for _ in range(rounds):
        leader = wait_leader(cluster, QUEUE)
        publisher_on = next(m for m in members if m is not leader)
        pub = Publisher(publisher_on, QUEUE, 1_000_000, prefix=f"f{time.monotonic()}")
        wait_for(lambda p=pub: len(p.confirmed) >= 100, 30, "publisher did not start")
        killed = time.monotonic()
        cluster.kill(leader)
        wait_for(lambda p=pub, k=killed: bool(p.times) and p.times[-1] > k, 30, "no confirm")
        pub.stop()
        gaps.append(next(t for t in pub.times if t > killed) - killed)
        octet = int(leader.host.rsplit(".", 1)[1])
        cluster.start(octet, publisher_on)
        time.sleep(3.0)   # it rejoins and catches up before the next round
    return gaps


def memory(cluster: Cluster, backlog: int) -> float:
    members = list(cluster.members.values())
    before = {m.name: psutil.Process(m.proc.pid).memory_info().rss for m in members}
    start = message_count(members[0], QUEUE)
    publisher = _spawn("publish", members[0].uri, 10_000)   # stopped by count below
    wait_for(lambda: message_count(members[0], QUEUE) >= start + backlog, 300, "backlog")
    publisher.kill()
    publisher.wait(10)
    time.sleep(2.0)
    grown = [psutil.Process(m.proc.pid).memory_info().rss - before[m.name] for m in members]
    count = message_count(members[0], QUEUE) - start
    return sum(grown) / len(grown) / max(count, 1)


def rabbitmq_throughput(seconds: float, arguments: dict | None = None) -> dict | None:
    """The throughput run against a 3-node RabbitMQ cluster (None when RabbitMQ is missing), on
    queue ``QUEUE`` declared with ``arguments`` (default: a quorum queue of 3 members)."""
    import pika

    from benchmarks.processes import rabbitmq_cluster

    with rabbitmq_cluster(3, "qbench") as nodes:
        if not nodes:
            return None
        url = f"amqp://guest:guest@127.0.0.1:{nodes[0].port}/%2F"
        conn = pika.BlockingConnection(pika.URLParameters(url))
        conn.channel().queue_declare(QUEUE, durable=True, arguments=arguments or {
            "x-queue-type": "quorum", "x-quorum-initial-group-size": 3})
        conn.close()
        urls = [f"amqp://guest:guest@127.0.0.1:{n.port}/%2F" for n in nodes]
        consumer = _spawn("consume", urls[2], seconds)
        time.sleep(1.0)
        publisher = _spawn("publish", urls[1], seconds)
        pub = json.loads(publisher.communicate(timeout=seconds + 120)[0])
        con = json.loads(consumer.communicate(timeout=seconds + 180)[0])
        return {"confirmed_per_s": pub["confirmed"] / pub["seconds"],
                "consumed_per_s": con["consumed"] / con["seconds"], "version": nodes[0].version}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--failovers", type=int, default=3)
    p.add_argument("--backlog", type=int, default=20000)
    p.add_argument("--append", action="store_true")
    p.add_argument("--rabbitmq", action="store_true", help="also a 3-node RabbitMQ cluster")
    p.add_argument("--role", choices=["publish", "consume"], help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role:
        return _role(args)
    with tempfile.TemporaryDirectory(prefix="quorum-bench-") as tmp:
        cluster = Cluster.create(Path(tmp))
        try:
            t = throughput(cluster, args.seconds)
            print(f"throughput: {t['confirmed_per_s']:,.0f} msg/s confirmed "
                  f"({t['confirmed']:,} on {t['publisher']}), {t['consumed_per_s']:,.0f} msg/s "
                  f"consumed ({t['consumed']:,} on {t['consumer']}), leader {t['leader']}",
                  flush=True)
            gaps = failovers(cluster, args.failovers)
            print("failover (kill -9 of the leader's broker -> next confirm): "
                  + ", ".join(f"{g:.2f} s" for g in gaps), flush=True)
            per_msg = memory(cluster, args.backlog)
            print(f"memory: {per_msg:,.0f} bytes RSS per ready 1 KiB message per broker",
                  flush=True)
        finally:
            cluster.stop_all()
    rabbit = rabbitmq_throughput(args.seconds) if args.rabbitmq else None
    if rabbit is not None:
        print(f"RabbitMQ {rabbit['version']} (3 nodes): {rabbit['confirmed_per_s']:,.0f} msg/s "
              f"confirmed, {rabbit['consumed_per_s']:,.0f} msg/s consumed", flush=True)
    if args.append:
        with RESULTS.open("a") as f:
            f.write(f"\n## Quorum queues (issue 12), {time.strftime('%Y-%m-%d')}\n\n"
                    "`python -m benchmarks.quorum` -- 3 brokers of ours on one 2-core machine, "
                    "one quorum queue (group of 3), 1 KiB persistent messages, confirms with a "
                    "window of 256 on one member, manual acks (prefetch 1000) on another, our "
                    "asyncio client:\n\n"
                    f"| figure | value |\n|---|---|\n"
                    f"| confirmed publishes | {t['confirmed_per_s']:,.0f} msg/s |\n"
                    f"| consumed (acked) | {t['consumed_per_s']:,.0f} msg/s |\n"
                    f"| kill -9 of the leader's broker -> next confirm | "
                    f"{', '.join(f'{g:.2f} s' for g in gaps)} |\n"
                    f"| memory per ready message (RSS growth per broker) | {per_msg:,.0f} B |\n")
            if rabbit is not None:
                f.write(f"| RabbitMQ {rabbit['version']}, 3 nodes, same clients: confirmed | "
                        f"{rabbit['confirmed_per_s']:,.0f} msg/s |\n"
                        f"| RabbitMQ: consumed | {rabbit['consumed_per_s']:,.0f} msg/s |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
