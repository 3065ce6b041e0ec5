"""The harness's output: the summary line, per-run lines, and its table in RESULTS.md.

The last line of every invocation is :func:`summary_line`:
``runs=N confirmed=C lost=L unexpected=U duplicates=D unavailable_s=T`` (sums over the runs that
reached the check; ``unavailable_s`` in seconds, one decimal). ``benchmarks/RESULTS.md`` gets one
row per invocation in its own ``## Fault injection (issue 11)`` section; the other sections of the
file are left as they are (the section is created at the end of the file the first time).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from .runner import RunOutcome

__all__ = ["SECTION", "Totals", "append_results", "run_line", "summary_line", "totals"]

SECTION = "## Fault injection (issue 11)"
HEADER = (
    "| date (UTC) | command | nemesis | queue | brokers | s/run | runs | confirmed | lost | "
    "unexpected | duplicates | unavailable_s | passed | kept run dirs |\n"
    "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)
INTRO = (
    "Jepsen-style runs of `python -m interop_tests.faults` (module docstring of "
    "`interop_tests/faults/__init__.py`): brokers in network namespaces, pika and aio-pika "
    "clients pinned one per broker, a nemesis, then heal, drain, count. lost = confirmed but "
    "never delivered; unexpected = delivered but never published; unavailable_s = seconds "
    "publishers went more than 1 s without a confirm, summed over publishers and runs. "
    "One row per invocation."
)


class Totals(NamedTuple):
    """Sums over the checked runs (``runs`` counts every run); ``unavailable_s`` in seconds."""

    runs: int
    confirmed: int
    lost: int
    unexpected: int
    duplicates: int
    unavailable_s: float


def totals(outcomes: Sequence[RunOutcome]) -> Totals:
    """Sum the checked runs (``runs`` counts every run, checked or not)."""
    confirmed = lost = unexpected = duplicates = 0
    unavailable = 0.0
    for o in outcomes:
        if o.result is None:
            continue
        confirmed += o.result.confirmed
        lost += o.result.lost
        unexpected += o.result.unexpected
        duplicates += o.result.duplicates
        unavailable += o.result.unavailable_s
    return Totals(len(outcomes), confirmed, lost, unexpected, duplicates, unavailable)


def summary_line(outcomes: Sequence[RunOutcome]) -> str:
    """The one final line (see the module docstring)."""
    runs, confirmed, lost, unexpected, duplicates, unavailable = totals(outcomes)
    return (f"runs={runs} confirmed={confirmed} lost={lost} unexpected={unexpected} "
            f"duplicates={duplicates} unavailable_s={unavailable:.1f}")


def run_line(index: int, total: int, o: RunOutcome) -> str:
    """A line about one run, printed as it ends."""
    head = f"run {index}/{total} {o.nemesis}: faults={o.faults} {o.seconds:.0f}s"
    if o.refused:
        return f"{head} queue refused by the broker: {o.refused}"
    if o.result is None:
        return f"{head} ERROR (see {o.run_dir}): {(o.error or '').strip().splitlines()[-1:]}"
    r = o.result
    text = (f"{head} attempted={r.attempted} confirmed={r.confirmed} failed={r.failed} "
            f"unknown={r.unknown} deliveries={r.deliveries} lost={r.lost} "
            f"unexpected={r.unexpected} duplicates={r.duplicates} recovered={r.recovered} "
            f"unavailable_s={r.unavailable_s:.1f} depths={o.depths}")
    if o.faults == 0 or r.confirmed == 0:
        text += " NOT A TEST (no fault injected or nothing confirmed)"
    if r.lost_ids:
        text += f" lost_ids={list(r.lost_ids)}"
    if o.kept:
        text += f" kept={o.run_dir}"
    return text


def _short(path: Path) -> Path:
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def append_results(path: Path, command: str, nemesis: str, queue_type: str, brokers: int,
                   seconds: float, outcomes: Sequence[RunOutcome]) -> None:
    """Add one row for this invocation to ``path``'s fault-injection section (made if absent).
    Raises ``OSError`` when the file cannot be written."""
    runs, confirmed, lost, unexpected, duplicates, unavailable = totals(outcomes)
    passed = sum(1 for o in outcomes if o.passed)
    kept = ", ".join(f"`{_short(o.run_dir)}`" for o in outcomes if o.kept) or "—"
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
    row = (f"| {now} | `{command}` | {nemesis} | {queue_type} | {brokers} | {seconds:g} | "
           f"{runs} | {confirmed} | {lost} | {unexpected} | {duplicates} | {unavailable:.1f} | "
           f"{passed}/{runs} | {kept} |")
    text = path.read_text() if path.exists() else ""
    start = text.find("\n" + SECTION)
    if start < 0:
        text = text.rstrip("\n") + f"\n\n{SECTION}\n\n{INTRO}\n\n{HEADER}\n{row}\n"
    else:
        nxt = text.find("\n## ", start + 1)
        end = len(text) if nxt < 0 else nxt
        section = text[start:end].rstrip("\n")
        if HEADER.splitlines()[0] not in section:
            section += f"\n\n{HEADER}"
        lines = section.split("\n")
        last_row = max(i for i, line in enumerate(lines) if line.startswith("|"))
        lines.insert(last_row + 1, row)
        section = "\n".join(lines) + "\n"
        rest = text[end:]
        text = text[:start] + section + ("\n" + rest.lstrip("\n") if rest else "")
    path.write_text(text)
