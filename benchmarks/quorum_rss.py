"""Quorum queues larger than RAM (issue 25): broker RSS while a quorum queue holds a backlog.

On one broker, then on a 3-broker cluster (127.0.0.2-4), one quorum queue gets a backlog of
``--backlog-mib`` MiB of ``--size-kib`` KiB persistent messages (default 1 GiB of 64 KiB),
published with confirms (``--window``, default 32) and no consumer; each broker's RSS is measured before and
after (psutil), and after a kill -9 and restart of the first broker (the backlog read back from
its log). Then the backlog is consumed and its bodies checked. RabbitMQ keeps a quorum queue's
bodies in its log segments and a small record per message in memory ("Quorum Queues", memory
usage, at least 32 bytes a message in RabbitMQ 4); the aim (issue 25) is at most 64 bytes of RSS
per ready message ("per message (max)": the largest growth of a broker over the messages). For
1 KiB messages: ``--backlog-mib 100 --size-kib 1`` (102,400 messages), ``--count N`` for N
messages of ``--size-kib``. The restarted broker's peak RSS (``VmHWM`` of /proc/<pid>/status: its
highest RSS since it started, i.e. during the replay of its log) is given beside its RSS once
the backlog is back. ``--queue-type stream``: the same with a stream (``x-queue-type: stream``;
consumed from ``x-stream-offset: first``, no ack).

    python -m benchmarks.quorum_rss [--backlog-mib 1024] [--size-kib 64] [--count N]
                                    [--brokers 1 3] [--queue-type quorum|stream]
                                    [--window 32] [--results]

``--results`` adds the figures to ``benchmarks/RESULTS.md`` (History). No assertion: figures.
Run it with ``AMQP_BROKER_PURE=1`` while the compiled build may be stale.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import psutil

from cluster.tests.processes import Cluster, Member, wait_for
from cluster.tests.quorum_scenarios import declare, message_count, wait_leader

QUEUE = "rss"
WINDOW = 32
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


async def _publish(url: str, count: int, size: int, window: int = WINDOW) -> None:
    from clients.aio import connect
    from clients.message import Properties

    props = Properties(delivery_mode=2)
    async with connect(url, reconnect=False, operation_timeout=120) as conn:
        ch = await conn.channel(confirm=True)
        pending: list = []
        for start in range(0, count, 8):
            n = min(8, count - start)
            bodies = [(b"%09d" % (start + i)).ljust(size, b".") for i in range(n)]
            pending.append(await ch.publish_batch(bodies, routing_key=QUEUE,
                                                  properties=props))
            while len(pending) * 8 > window:
                await ch.wait_confirmations(pending.pop(0))
        for batch in pending:
            await ch.wait_confirmations(batch)


async def _consume(url: str, count: int, stream: bool = False) -> int:
    """Consume ``count`` messages (acked; a stream's from its first offset); returns how many
    had the body published for them."""
    from clients.aio import connect

    good = 0
    async with connect(url, reconnect=False, operation_timeout=120) as conn:
        ch = await conn.channel(prefetch=200)
        consumer = await ch.basic_consume(
            QUEUE, arguments={"x-stream-offset": "first"} if stream else None)
        it = consumer.__aiter__()
        for k in range(count):
            msg = await asyncio.wait_for(it.__anext__(), 60)
            body = bytes(msg.body)
            good += body[:9].isdigit() and body[9:] == b"." * (len(body) - 9)
            if k % 64 == 63 or k == count - 1:
                await msg.ack(multiple=True)
        await conn.drain()
    return good


def _serving(member: Member) -> bool:
    """``member.serving()``, False too while its handshake times out (a broker replaying a
    large backlog at start accepts the connection and answers only once done)."""
    try:
        return member.serving()
    except Exception:   # pika's AMQPConnectorStackTimeout is no AMQPError
        return False


def _rss(members: list[Member]) -> dict[str, int]:
    return {m.name: psutil.Process(m.proc.pid).memory_info().rss for m in members}  # type: ignore[union-attr]


def _peak(member: Member) -> int:
    """The highest RSS of ``member``'s process since it started (bytes; ``VmHWM``, Linux)."""
    status = Path(f"/proc/{member.proc.pid}/status").read_text()  # type: ignore[union-attr]
    line = next(x for x in status.splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def run(brokers: int, backlog_mib: int, size_kib: int, count: int = 0,
        queue_type: str = "quorum", window: int = WINDOW) -> dict:
    """One run on ``brokers`` brokers: RSS (bytes) before, with the backlog, after a restart
    and its peak during the restart; ``count`` messages (0: ``backlog_mib`` MiB of them),
    published with ``window`` unconfirmed messages at most."""
    size = size_kib * 1024
    count = count or backlog_mib * 1024 // size_kib
    with tempfile.TemporaryDirectory(prefix="quorum-rss-") as tmp:
        cluster = Cluster.create(Path(tmp))
        try:
            if brokers == 1:
                members = [cluster.start(2)]
            else:
                members = list(cluster.start_three())
            declare(members[0], QUEUE, **{"x-queue-type": queue_type})
            if queue_type == "quorum":
                wait_leader(cluster, QUEUE)
            time.sleep(1.0)
            before = _rss(members)
            t0 = time.monotonic()
            asyncio.run(_publish(members[0].uri, count, size, window))
            seconds = time.monotonic() - t0
            wait_for(lambda: all(message_count(m, QUEUE) >= count for m in members), 300,
                     "backlog not on every member")
            time.sleep(2.0)
            loaded = _rss(members)
            grown = [loaded[n] - before[n] for n in before]
            print(f"{brokers} broker(s), {count:,} messages: RSS growth "
                  + ", ".join(f"{g / 2**20:,.0f}" for g in grown)
                  + f" MiB, {max(grown) / count:,.0f} B a message", flush=True)
            first = members[0]
            cluster.kill(first)
            # a large backlog replays longer than the helper's 20 s wait for a broker to come up
            cluster.start(2, members[1] if brokers > 1 else None, wait=False)
            slow = 120 + count // 2000
            wait_for(lambda: _serving(first), slow, "the restarted broker does not serve")
            wait_for(lambda: message_count(first, QUEUE) >= count, slow, "backlog lost")
            time.sleep(2.0)
            restarted = _rss([first])[first.name]
            peak = _peak(first)
            print(f"after kill -9 + restart: RSS {restarted / 2**20:,.0f} MiB, peak "
                  f"{peak / 2**20:,.0f} MiB", flush=True)
            good = asyncio.run(_consume(first.uri, count, queue_type == "stream"))
            return {"brokers": brokers, "count": count, "size": size, "seconds": seconds,
                    "before": before, "loaded": loaded, "restarted": restarted,
                    "peak": peak, "good": good, "type": queue_type}
        finally:
            cluster.stop_all()


def _line(r: dict) -> str:
    backlog = r["count"] * r["size"]
    grown = [r["loaded"][n] - r["before"][n] for n in r["before"]]
    first = next(iter(r["before"]))
    return (f"| {r['brokers']} | {r['count']:,} x {r['size'] // 1024} KiB = "
            f"{backlog / 2**20:,.0f} MiB | {r['count'] / r['seconds']:,.0f} msg/s | "
            + ", ".join(f"{g / 2**20:,.0f}" for g in grown) + " MiB | "
            f"{max(grown) / r['count']:,.0f} B | "
            f"{(r['restarted'] - r['before'][first]) / 2**20:,.0f} MiB | "
            f"{r['restarted'] / 2**20:,.0f} MiB (peak {r['peak'] / 2**20:,.0f} MiB) | "
            f"{r['good']:,} of {r['count']:,} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backlog-mib", type=int, default=1024)
    p.add_argument("--size-kib", type=int, default=64)
    p.add_argument("--count", type=int, default=0,
                   help="messages (default: --backlog-mib of them)")
    p.add_argument("--brokers", type=int, nargs="+", default=[1, 3])
    p.add_argument("--queue-type", choices=("quorum", "stream"), default="quorum")
    p.add_argument("--window", type=int, default=WINDOW,
                   help="unconfirmed messages at most while publishing (default 32)")
    p.add_argument("--results", action="store_true")
    args = p.parse_args(argv)
    lines = [f"| brokers ({args.queue_type}) | backlog | published (confirmed) | RSS growth per "
             "broker | per message (max) | RSS growth after kill -9 + restart (first broker) | "
             "its RSS after restart (peak during it, VmHWM) | bodies consumed intact |",
             "|---|---|---|---|---|---|---|---|"]
    for n in args.brokers:
        lines.append(_line(run(n, args.backlog_mib, args.size_kib, args.count,
                               args.queue_type, args.window)))
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    print(table)
    if args.results:
        with RESULTS.open("a") as f:
            f.write(f"\n## Quorum queue backlog RSS (issue 25), {time.strftime('%Y-%m-%d %H:%M')}"
                    f" UTC, `python -m benchmarks.quorum_rss`\n\n{table}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
