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

``--broker-src DIR`` (repeatable, labelled by ``--src-label``) runs our two brokers of the
our-shovel cases from that source tree (e.g. ``git archive <commit> | tar -x -C DIR``: its own
Python source, no compiled build) instead of the installed package, so a commit before a change
and one after are measured in one sitting beside the same RabbitMQ nodes. ``--rounds N`` runs
every case N times, interleaved (round 1 of every case, then round 2...), and reports the
median and the range: the machine's load moves in between.

    .venv/bin/python -m benchmarks.shovel [--messages N] [--rounds N] [--no-rabbitmq]
        [--broker-src DIR [--src-label TEXT]]... [--results]
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import shlex
import statistics
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


class _OursFrom(OurBroker):
    """Our broker run from the source tree ``src``: ``python -P`` keeps the working directory
    (this checkout) off ``sys.path`` and ``PYTHONPATH`` puts ``src`` first."""

    def __init__(self, workdir: Path, extra_args: list[str], src: Path) -> None:
        super().__init__(workdir, extra_args)
        self.src = src

    def command(self) -> list[str]:
        """``OurBroker.command`` with ``-P`` after the interpreter."""
        cmd = super().command()
        return [cmd[0], "-P", *cmd[1:]]

    def start(self) -> None:
        """``OurBroker.start`` with ``PYTHONPATH`` set to the source tree for the child."""
        saved = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(self.src)
        try:
            super().start()
        finally:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved


def _ours(workdir: Path, name: str, src: Path | None = None) -> tuple[OurBroker, str]:
    http = free_port()
    extra = ["--management-port", str(http)]
    b = OurBroker(workdir / name, extra) if src is None else _OursFrom(workdir / name, extra, src)
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


def _cell(rates: list[float]) -> str:
    """msg/s cell: the median of the rounds, with their range when more than one."""
    if len(rates) == 1:
        return f"{rates[0]:,.0f}"
    return f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


def main(argv: list[str] | None = None) -> int:
    """Run the cases (see module docstring); prints a markdown table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--rounds", type=int, default=1, help="runs of every case, interleaved")
    p.add_argument("--no-rabbitmq", action="store_true")
    p.add_argument("--broker-src", type=Path, action="append", default=[],
                   help="run our brokers from this source tree (repeatable)")
    p.add_argument("--src-label", action="append", default=[],
                   help="the table's label for each --broker-src, in order")
    p.add_argument("--results", action="store_true", help="write RESULTS.md's shovel section")
    args = p.parse_args(argv)
    sources: list[Path | None] = [s.resolve() for s in args.broker_src] or [None]
    labels = args.src_label + [str(s) if s else "" for s in sources[len(args.src_label):]]
    work = Path(tempfile.mkdtemp(prefix="shovel-bench-"))
    started: list = []
    rates: dict[str, list[float]] = {}
    arrived: dict[str, list[int]] = {}
    rabbit_info: RabbitMQ | None = None
    load = [", ".join(f"{x:.2f}" for x in os.getloadavg())]
    uri = f"amqp://guest:guest@{HOST}:%d/%%2F"   # vhost "/" (RabbitMQ reads "/" as "")
    try:
        cases: list[tuple[str, str, str, str]] = []   # (case, src uri, dest uri, dest api)
        for i, (src, label) in enumerate(zip(sources, labels, strict=True)):
            a, _ = _ours(work, f"a{i}", src)
            started.append(a)
            b, b_api = _ours(work, f"b{i}", src)
            started.append(b)
            tag = f" ({label})" if label else ""
            cases.append((f"ours -> ours, our shovel{tag}", uri % a.port, uri % b.port, b_api))
        if not args.no_rabbitmq:
            r1, _ = _rabbit()
            started.append(r1)
            rabbit_info = r1
            for i, label in enumerate(labels):
                b_uri, b_api = cases[i][2], cases[i][3]
                tag = f" ({label})" if label else ""
                cases.append((f"RabbitMQ -> ours, our shovel{tag}", uri % r1.port, b_uri, b_api))
            r2, r2_api = _rabbit()
            started.append(r2)
            cases.append(("RabbitMQ -> RabbitMQ, RabbitMQ's shovel", uri % r1.port,
                          uri % r2.port, r2_api))
        for n in range(args.rounds):
            for k, (case, src_uri, dest_uri, api) in enumerate(cases):
                rate, got = shovel_rate(src_uri, dest_uri, api, args.messages, f"c{k}r{n}")
                rates.setdefault(case, []).append(rate)
                arrived.setdefault(case, []).append(got)
                print(f"round {n + 1}: {case}: {rate:,.0f} msg/s, {got:,} arrived", flush=True)
            load.append(", ".join(f"{x:.2f}" for x in os.getloadavg()))
    finally:
        for x in reversed(started):
            x.stop()
    msg_s = "msg/s" if args.rounds == 1 else f"msg/s, median (range) of {args.rounds} rounds"
    table = [f"| case | {msg_s} | at the destination |", "|---|---|---|"]
    table += [f"| {case} | {_cell(rates[case])} | "
              f"{', '.join(f'{g:,}' for g in sorted(set(arrived[case])))} of {args.messages:,} |"
              for case in rates]
    print("\n".join(table))
    print("load average after each round:", " / ".join(load[1:]))
    if args.results:
        now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
        cmdline = shlex.join(["python", "-m", "benchmarks.shovel", *(argv or sys.argv[1:])])
        sources_line = ["- our brokers ran from the source trees the labels name (`--broker-src`, "
                        "`git archive` of that commit: their own Python source, no compiled "
                        "build)"] if args.broker_src else []
        section = "\n".join([
            f"{HEADING}: shovelled msg/s (1 KiB persistent, on-confirm), run of {now}\n",
            "\n".join(machine_info(rabbit_info) + sources_line),
            f"- load average (1, 5, 15 min) after each round: {' / '.join(load[1:])}",
            f"- `{cmdline}`: a backlog moved by one dynamic shovel declared on the destination "
            "broker\n", *table, ""])
        RESULTS_MD.write_text(place_latest(section, RESULTS_MD.read_text(), HEADING))
    return 0


if __name__ == "__main__":
    sys.exit(main())
