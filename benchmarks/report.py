"""The benchmark's report: the markdown tables printed at the end and ``benchmarks/RESULTS.md``.

Split out of ``benchmarks/run.py``. :func:`markdown_table` is the summary (one row per case, ours
next to RabbitMQ), :func:`raw_table` every amqbench figure of every run, :func:`notes` anything odd
(lost messages, failures, persistent messages that never reached the disk), :func:`machine_info`
the machine, Python, commit and RabbitMQ version, and :func:`write_results` rewrites RESULTS.md
with all of them.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path

from benchmarks.amqbench import Case, Result
from benchmarks.processes import REPO_ROOT, RabbitMQ

RESULTS_MD = REPO_ROOT / "benchmarks" / "RESULTS.md"


def fmt_rate(result: Result | None) -> str:
    """msg/s cell: consumed per second, marked when messages were lost or the run failed."""
    if result is None:
        return "—"
    if not result.ok:
        return "failed"
    cell = f"{result.figures['consumed_per_s']:,.0f}"
    return cell + (" ⚠" if result.lost else "")


def fmt_latency(result: Result | None) -> str:
    """p50 / p99 cell in µs."""
    if result is None or not result.ok:
        return "—"
    return f"{result.figures['p50_us']:,.0f} / {result.figures['p99_us']:,.0f}"


def fmt_cpu(result: Result | None) -> str:
    """CPU µs per consumed message."""
    if result is None or result.cpu_us_per_msg is None:
        return "—"
    return f"{result.cpu_us_per_msg:,.1f}"


def fmt_ratio(ours: Result | None, theirs: Result | None) -> str:
    """ours ÷ RabbitMQ consumed msg/s."""
    if not (ours and theirs and ours.ok and theirs.ok and theirs.figures["consumed_per_s"]):
        return "—"
    return f"{ours.figures['consumed_per_s'] / theirs.figures['consumed_per_s']:.2f}×"


def markdown_table(cases: Sequence[Case], results: dict[tuple[str, str], Result]) -> str:
    """The summary table, one row per case."""
    rows = [
        "| case | ours msg/s | RabbitMQ msg/s | ratio | ours p50/p99 µs | RabbitMQ p50/p99 µs "
        "| ours CPU µs/msg | RabbitMQ CPU µs/msg |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        ours, theirs = results.get((case.key, "ours")), results.get((case.key, "RabbitMQ"))
        rows.append(
            f"| {case.title} | {fmt_rate(ours)} | {fmt_rate(theirs)} | {fmt_ratio(ours, theirs)} "
            f"| {fmt_latency(ours)} | {fmt_latency(theirs)} | {fmt_cpu(ours)} | {fmt_cpu(theirs)} |"
        )
    return "\n".join(rows)


def fmt_mib(n: int | None) -> str:
    """Bytes as MiB with one decimal ('—' when unknown)."""
    return "—" if n is None else f"{n / 2**20:,.1f}"


def raw_table(cases: Sequence[Case], results: dict[tuple[str, str], Result]) -> str:
    """Every amqbench figure of every run, for checking the summary."""
    rows = [
        "| case | broker | exit | published | consumed | seconds | published/s | consumed/s "
        "| p50 µs | p99 µs | p99.9 µs | disk written MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        for label in ("ours", "RabbitMQ"):
            r = results.get((case.key, label))
            if r is None:
                continue
            if not r.ok:
                rows.append(f"| {case.key} | {label} | {r.returncode} | {r.error} ||||||||")
                continue
            f = r.figures
            rows.append(
                f"| {case.key} | {label} | {r.returncode} | {f['published']:,.0f} "
                f"| {f['consumed']:,.0f} | {f['seconds']:.2f} | {f['published_per_s']:,.0f} "
                f"| {f['consumed_per_s']:,.0f} | {f['p50_us']:,.0f} | {f['p99_us']:,.0f} "
                f"| {f['p999_us']:,.0f} | {fmt_mib(r.disk_bytes)} |"
            )
    return "\n".join(rows)


def notes(
    cases: Sequence[Case], results: dict[tuple[str, str], Result], extra: list[str]
) -> list[str]:
    """Anything odd: lost messages (amqbench exit 3), failures, restarts, persistence not on disk."""
    out = list(extra)
    for case in cases:
        for label in ("ours", "RabbitMQ"):
            r = results.get((case.key, label))
            if r is None:
                continue
            if r.error:
                out.append(f"{case.title}, {label}: {r.error}")
            elif r.lost:
                f = r.figures
                out.append(
                    f"{case.title}, {label}: amqbench exited {r.returncode}: "
                    f"{f['consumed']:,.0f} of {f['published']:,.0f} published messages consumed "
                    f"within the 5 s drain ({r.lost:,} not)"
                )
            if case.persistent and r.ok and r.disk_bytes is not None:
                if r.disk_bytes < r.body_bytes / 2:  # not even half the bodies reached the disk
                    out.append(
                        f"{case.title}, {label}: the broker process wrote only "
                        f"{fmt_mib(r.disk_bytes)} MiB to disk while {fmt_mib(r.body_bytes)} MiB of "
                        "persistent message bodies were published and confirmed, so it did not "
                        "store them on disk (this row is not like for like)"
                    )
    return out


def machine_info(rabbit: RabbitMQ | None) -> list[str]:
    """Lines describing the machine, Python, our broker's commit and RabbitMQ."""
    cpus = os.cpu_count()
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    commit = (
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        or "?"
    )
    dirty = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout.strip()
    uvloop = "with uvloop" if importlib.util.find_spec("uvloop") else "asyncio event loop"
    lines = [
        f"- machine: {cpus} CPUs ({model}), Linux {platform.release()}, "
        f"load average {load} at the start",
        f"- Python {platform.python_version()} ({uvloop}); our broker at commit {commit}"
        + (" plus uncommitted changes" if dirty else ""),
    ]
    if rabbit is not None:
        lines.append(
            f"- RabbitMQ {rabbit.version} ({rabbit.erlang}), default configuration, "
            "a private node on 127.0.0.1"
        )
    else:
        lines.append("- RabbitMQ: not measured")
    return lines


HEADER = """# Results

Benchmark results of amqp-broker: our broker against RabbitMQ on the same machine, in the same run.
**Latest** has the current figures of each benchmark; **History** keeps every earlier sitting.
`make bench` (amqbench, `../shared/bench`, a C load generator on rabbitmq-c: one producer and one
consumer connection on one queue) replaces the make bench part of Latest and moves the one it
replaces into History. Compare the ratios of one run, not absolute figures across runs or machines.
"""

LEGEND = """msg/s is messages consumed per second over the run (publishing time plus up to 5 s for
the consumer to drain the queue); ratio is ours ÷ RabbitMQ. Latency is publish-to-deliver, measured
by the consumer; in the as-fast-as-possible cases it mostly measures the backlog the producer builds
up in the queue, so read latency in the fixed-rate row. CPU µs/msg is the broker process's user +
system CPU time during the run divided by the messages consumed; disk written (raw figures) is what
that process wrote to storage (/proc/<pid>/io). ⚠ marks runs where not every published message was
consumed (amqbench exit 3)."""


def write_results(
    path: Path,
    args: argparse.Namespace,
    cases: Sequence[Case],
    results: dict[tuple[str, str], Result],
    info: list[str],
    odd: list[str],
) -> None:
    """Put this run into RESULTS.md as the ``### make bench`` subsection of ``## Latest`` (run
    details, the table, notes, the raw figures). The make bench subsection it replaces moves to
    the top of ``## History`` as a ``## make bench, ...`` section; everything else (the title and
    intro, the other Latest subsections, the History sections other scripts append) is kept. A
    file without ``## Latest`` gets that layout: the title, Latest, then the old text as History."""
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    settings = f"- {args.seconds} s of publishing per case"
    if args.our_args:
        settings += f"; our broker started with extra arguments `{args.our_args}`"
    parts = [
        f"{MAKE_BENCH_HEADING}, run of {now}\n",
        "\n".join(info + [settings]) + "\n",
        markdown_table(cases, results) + "\n",
        LEGEND + "\n",
    ]
    if odd:
        parts.append("Notes:\n\n" + "\n".join(f"- {n}" for n in odd) + "\n")
    parts.append("#### Raw amqbench figures\n\n" + raw_table(cases, results) + "\n")
    try:
        old = path.read_text()
    except OSError:
        old = ""
    path.write_text(place_latest("\n".join(parts), old))


#: the heading of make bench's subsection in ``## Latest``
MAKE_BENCH_HEADING = "### make bench: ours against RabbitMQ"


def place_latest(section: str, text: str, heading: str = MAKE_BENCH_HEADING) -> str:
    """``text`` (RESULTS.md) with ``section`` (a ``### make bench...`` subsection, or another
    whose first line starts with ``heading``) as the first subsection of ``## Latest``,
    replacing the one there; the replaced one becomes the first ``## `` section of ``## History``
    (its headings one level up). Pure: str in, str out."""
    if "\n## Latest\n" not in text or "\n## History\n" not in text:
        history = text.split("\n", 1)[1] if text.startswith("# ") else text
        return (f"{HEADER}\n## Latest\n\n{section}\n## History\n\n{history.strip()}\n"
                if history.strip() else f"{HEADER}\n## Latest\n\n{section}\n## History\n")
    head, rest = text.split("\n## Latest\n", 1)
    latest, history = rest.split("\n## History\n", 1)
    subsections = latest.split("\n### ")
    intro, subs = subsections[0], ["### " + s for s in subsections[1:]]
    replaced = [s for s in subs if s.startswith(heading)]
    kept = [s for s in subs if not s.startswith(heading)]
    body = "\n".join([section.rstrip("\n") + "\n", *[s.rstrip("\n") + "\n" for s in kept]])
    new_latest = (intro.rstrip("\n") + "\n\n" if intro.strip() else "\n") + body
    moved = ""
    for old in replaced:
        # one heading level up: the subsection becomes a History section
        lines = [line[1:] if line.startswith("###") else line
                 for line in old.rstrip("\n").split("\n")]
        moved += "\n".join(lines) + "\n\n"
    hist_intro, _, hist_sections = history.partition("\n## ")
    history = (hist_intro.rstrip("\n") + "\n\n" + moved
               + ("## " + hist_sections if hist_sections else ""))
    return f"{head}\n## Latest\n{new_latest}\n## History\n{history}"
