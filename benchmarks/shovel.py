"""Shovelled messages per second (issue 27): a dynamic shovel moving a backlog of 1 KiB
persistent messages with ``ack-mode`` on-confirm, from one broker of ours to another, from
RabbitMQ to ours, and RabbitMQ's own shovel (rabbitmq_shovel, 3.10) from RabbitMQ to another
RabbitMQ node on the same machine, each over TCP on 127.0.0.1.

Each case preloads ``--messages`` (default 100,000) into the source queue (publisher confirms),
then declares the shovel on the destination broker (``PUT /api/parameters/shovel/...``) and
times from there until the destination queue holds them all and the source is empty (polled
every 0.1 s): msg/s = messages / seconds. The destination count is checked afterwards (every
message there, duplicates reported). ``--results`` puts the table into RESULTS.md as the
``### shovel`` subsection of Latest (``report.place_latest``). Needs Debian's rabbitmq-server
for the RabbitMQ cases (``--no-rabbitmq`` skips them).

    .venv/bin/python -m benchmarks.shovel [--messages N] [--no-rabbitmq] [--results]
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from benchmarks.processes import HOST, OurBroker, RabbitMQ, free_port
from benchmarks.report import RESULTS_MD, machine_info, place_latest
from clients.blocking import BlockingConnection
from clients.message import Properties

HEADING = "### shovel"
BODY = b"x" * 1024


def _api(base: str, path: str, method: str = "GET", body: object = None) -> object:
    req = urllib.request.Request(base + "/api" + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Basic " + base64.b64encode(
                                     b"guest:guest").decode(),
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        text = resp.read()
    return json.loads(text) if text.strip() else None


def _preload(uri: str, queue: str, n: int) -> None:
    with BlockingConnection(uri) as conn:
        ch = conn.channel(confirm=True)
        ch.queue_declare(queue, durable=True)
        ch.queue_purge(queue)
        ch.publish_many((BODY for _ in range(n)), "", queue, Properties(delivery_mode=2),
                        batch=1000)


def _count(uri: str, queue: str) -> int:
    with BlockingConnection(uri) as conn:
        return conn.channel().queue_declare(queue, passive=True).message_count


def shovel_rate(src_uri: str, dest_uri: str, dest_api: str, n: int, name: str,
                limit: float = 1800.0) -> tuple[float, int]:
    """(msg/s, messages at the destination) of one shovel declared on ``dest_api``'s broker
    moving ``n`` preloaded messages from ``src_uri`` to ``dest_uri`` (bounded by ``limit`` s)."""
    src_q, dest_q = f"bench.{name}.src", f"bench.{name}.dest"
    _preload(src_uri, src_q, n)
    with BlockingConnection(dest_uri) as conn:
        ch = conn.channel()
        ch.queue_declare(dest_q, durable=True)
        ch.queue_purge(dest_q)
    value = {"src-uri": src_uri, "src-queue": src_q, "dest-uri": dest_uri, "dest-queue": dest_q,
             "ack-mode": "on-confirm"}
    start = time.monotonic()
    _api(dest_api, f"/parameters/shovel/%2F/{name}", "PUT", {"value": value})
    while time.monotonic() - start < limit:
        if _count(dest_uri, dest_q) >= n and _count(src_uri, src_q) == 0:
            break
        time.sleep(0.1)
    elapsed = time.monotonic() - start
    _api(dest_api, f"/parameters/shovel/%2F/{name}", "DELETE")
    return n / elapsed, _count(dest_uri, dest_q)


def _ours(workdir: Path, name: str) -> tuple[OurBroker, str]:
    http = free_port()
    b = OurBroker(workdir / name, ["--management-port", str(http)])
    (workdir / name).mkdir()
    b.start()
    base = f"http://{HOST}:{http}"
    for _ in range(300):   # the HTTP listener opens beside the AMQP one
        try:
            _api(base, "/overview")
            break
        except (OSError, urllib.error.URLError):
            time.sleep(0.1)
    return b, base


def _rabbit() -> tuple[RabbitMQ, str]:
    http = free_port()
    r = RabbitMQ(conf=f"management.tcp.port = {http}\nmanagement.tcp.ip = {HOST}\n",
                 plugins="[rabbitmq_management,rabbitmq_shovel,rabbitmq_shovel_management]")
    r.start()
    return r, f"http://{HOST}:{http}"


def main(argv: list[str] | None = None) -> int:
    """Run the cases (see module docstring); prints a markdown table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--no-rabbitmq", action="store_true")
    p.add_argument("--results", action="store_true", help="write RESULTS.md's shovel section")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="shovel-bench-"))
    started: list = []
    rows: list[tuple[str, float, int]] = []
    rabbit_info: RabbitMQ | None = None
    try:
        a, _ = _ours(work, "a")
        started.append(a)
        b, b_api = _ours(work, "b")
        started.append(b)
        uri = f"amqp://guest:guest@{HOST}:%d/%%2F"   # vhost "/" (RabbitMQ reads "/" as "")
        rate, got = shovel_rate(uri % a.port, uri % b.port, b_api, args.messages, "ours-ours")
        rows.append(("ours -> ours, our shovel", rate, got))
        if not args.no_rabbitmq:
            r1, _ = _rabbit()
            started.append(r1)
            rabbit_info = r1
            rate, got = shovel_rate(uri % r1.port, uri % b.port, b_api, args.messages, "rmq-ours")
            rows.append(("RabbitMQ -> ours, our shovel", rate, got))
            r2, r2_api = _rabbit()
            started.append(r2)
            rate, got = shovel_rate(uri % r1.port, uri % r2.port, r2_api, args.messages,
                                    "rmq-rmq")
            rows.append(("RabbitMQ -> RabbitMQ, RabbitMQ's shovel", rate, got))
    finally:
        for x in reversed(started):
            x.stop()
    table = ["| case | msg/s | at the destination |", "|---|---|---|"]
    table += [f"| {case} | {rate:,.0f} | {got:,} of {args.messages:,} |"
              for case, rate, got in rows]
    print("\n".join(table))
    if args.results:
        now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
        section = "\n".join([
            f"{HEADING}: shovelled msg/s (1 KiB persistent, on-confirm), run of {now}\n",
            "\n".join(machine_info(rabbit_info)),
            f"- `python -m benchmarks.shovel --messages {args.messages}`: a backlog moved by "
            "one dynamic shovel declared on the destination broker\n", *table, ""])
        RESULTS_MD.write_text(place_latest(section, RESULTS_MD.read_text(), HEADING))
    return 0


if __name__ == "__main__":
    sys.exit(main())
