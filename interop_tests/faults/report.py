"""The harness's output: the summary line, per-run lines, and its table in RESULTS.md.

The last line of every invocation is :func:`summary_line`:
``runs=N confirmed=C lost=L unexpected=U duplicates=D unavailable_s=T tracebacks=K diverged=R
divergent=V lost_changes=W``
(sums over the runs that reached the check; ``unavailable_s`` in seconds, one decimal;
``tracebacks``: Python tracebacks in the brokers' logs, over every run; ``diverged``: runs whose
quorum queue replicas disagreed or did not catch up, :mod:`interop_tests.faults.replicas`;
``divergent``: definition names that differ between members after the heal, and
``lost_changes``: acknowledged definition changes missing, both summed over the runs of the
definitions workload, :mod:`interop_tests.faults.defs_check`, 0 without it). ``benchmarks/RESULTS.md`` gets one
row per invocation in its own ``## Fault injection (issue 11)`` section (a run of the definitions
workload in ``## Fault injection: definitions (issue 23)``); the other sections of the
file are left as they are (the section is created at the end of the file the first time).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from .runner import RunOutcome

__all__ = ["DEFS_SECTION", "SECTION", "Totals", "append_results", "run_line", "summary_line",
           "totals"]

SECTION = "## Fault injection (issue 11)"
HEADER = (
    "| date (UTC) | command | nemesis | queue | brokers | s/run | runs | confirmed | lost | "
    "unexpected | duplicates | unavailable_s | tracebacks | diverged | passed | kept run dirs |\n"
    "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)
INTRO = (
    "Jepsen-style runs of `python -m interop_tests.faults` (module docstring of "
    "`interop_tests/faults/__init__.py`): brokers in network namespaces, pika and aio-pika "
    "clients pinned one per broker, a nemesis, then heal, drain, count. lost = confirmed but "
    "never delivered; unexpected = delivered but never published; unavailable_s = seconds "
    "publishers went more than 1 s without a confirm, summed over publishers and runs; "
    "tracebacks = Python tracebacks in the brokers' logs; diverged = runs whose quorum queue "
    "replicas, read from their files after the drain, disagreed or lagged. "
    "One row per invocation."
)
DEFS_SECTION = "## Fault injection: definitions (issue 23)"
DEFS_HEADER = (
    "| date (UTC) | command | nemesis | brokers | s/run | runs | changes | acked | refused | "
    "unknown | divergent | lost_changes | tracebacks | passed | kept run dirs |\n"
    "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)
DEFS_INTRO = (
    "Runs of `python -m interop_tests.faults --workload definitions` "
    "(`interop_tests/faults/defs_workload.py`): a client per broker declares, binds and deletes "
    "queues and exchanges over AMQP and changes users, permissions and policies over the "
    "management API, all over the same few names, while the nemesis runs; after the heal every "
    "member's `GET /api/definitions` is compared. divergent = names that differ between "
    "members; lost_changes = acknowledged changes the final definitions do not show although "
    "no later change could have undone them; refused = 404/406/4xx answers; unknown = no "
    "answer. One row per invocation."
)


class Totals(NamedTuple):
    """Sums over the checked runs (``runs``, ``tracebacks`` and ``diverged`` count every run);
    ``unavailable_s`` in seconds."""

    runs: int
    confirmed: int
    lost: int
    unexpected: int
    duplicates: int
    unavailable_s: float
    tracebacks: int = 0
    diverged: int = 0
    divergent: int = 0
    lost_changes: int = 0


def totals(outcomes: Sequence[RunOutcome]) -> Totals:
    """Sum the checked runs (``runs`` counts every run, checked or not)."""
    confirmed = lost = unexpected = duplicates = 0
    unavailable = 0.0
    tracebacks = sum(o.tracebacks for o in outcomes)
    diverged = sum(1 for o in outcomes if o.replica_problems)
    defs = [o.definitions for o in outcomes if o.definitions is not None]
    for o in outcomes:
        if o.result is None:
            continue
        confirmed += o.result.confirmed
        lost += o.result.lost
        unexpected += o.result.unexpected
        duplicates += o.result.duplicates
        unavailable += o.result.unavailable_s
    return Totals(len(outcomes), confirmed, lost, unexpected, duplicates, unavailable,
                  tracebacks, diverged, sum(d.divergent for d in defs),
                  sum(d.lost_changes for d in defs))


def summary_line(outcomes: Sequence[RunOutcome]) -> str:
    """The one final line (see the module docstring)."""
    t = totals(outcomes)
    return (f"runs={t.runs} confirmed={t.confirmed} lost={t.lost} unexpected={t.unexpected} "
            f"duplicates={t.duplicates} unavailable_s={t.unavailable_s:.1f} "
            f"tracebacks={t.tracebacks} diverged={t.diverged} divergent={t.divergent} "
            f"lost_changes={t.lost_changes}")


def run_line(index: int, total: int, o: RunOutcome) -> str:
    """A line about one run, printed as it ends."""
    head = f"run {index}/{total} {o.nemesis}: faults={o.faults} {o.seconds:.0f}s"
    if o.refused:
        return f"{head} queue refused by the broker: {o.refused}"
    if o.definitions is not None:
        d = o.definitions
        head += (f" definitions: changes={d.changes} acked={d.acked} refused={d.refused}"
                 f" unknown={d.unknown} divergent={d.divergent} lost_changes={d.lost_changes}"
                 + (";" if o.result is not None else ""))
        if d.divergent_names or d.lost_names or d.unread:
            head += (f" divergent_names={list(d.divergent_names)} lost_names="
                     f"{list(d.lost_names)} unread={list(d.unread)}")
        if d.misattributed:
            head += f" MISATTRIBUTED={list(d.misattributed)}"
    if o.result is None and (o.workload != "definitions" or o.error):
        return f"{head} ERROR (see {o.run_dir}): {(o.error or '').strip().splitlines()[-1:]}"
    if o.result is None:
        return head + (f" TRACEBACKS={o.logs.tracebacks}" if o.tracebacks else "") + \
            (f" kept={o.run_dir}" if o.kept else "")
    r = o.result
    text = (f"{head} attempted={r.attempted} confirmed={r.confirmed} failed={r.failed} "
            f"unknown={r.unknown} deliveries={r.deliveries} lost={r.lost} "
            f"unexpected={r.unexpected} duplicates={r.duplicates} recovered={r.recovered} "
            f"unavailable_s={r.unavailable_s:.1f} depths={o.depths}")
    if o.faults == 0 or r.confirmed == 0:
        text += " NOT A TEST (no fault injected or nothing confirmed)"
    if r.lost_ids:
        text += (f" lost_ids={list(r.lost_ids)} lost_prefix={r.lost_prefix} "
                 f"lost_middle={r.lost_middle} lost_suffix={r.lost_suffix}")
    if o.tracebacks:
        text += f" TRACEBACKS={o.logs.tracebacks}"
    if o.replica_problems:
        text += f" REPLICAS: {'; '.join(o.replica_problems)}"
    if o.stream is not None:
        st = o.stream
        text += (f" stream: offsets={st.offsets} out_of_order={st.out_of_order} "
                 f"conflicts={st.conflicts} multi_offset={st.multi_offset} "
                 f"drain_missing={st.drain_missing}")
        if st.examples:
            text += f" STREAM: {'; '.join(st.examples)}"
    losses = {k: v for k, v in o.logs.losses.items() if v}
    if losses:
        text += f" replica_losses_detected={losses}"
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
    """Add one row for this invocation to ``path``'s fault-injection section (made if absent);
    runs of the definitions workload go to its own section. Raises ``OSError`` when the file
    cannot be written."""
    t = totals(outcomes)
    passed = sum(1 for o in outcomes if o.passed)
    kept = ", ".join(f"`{_short(o.run_dir)}`" for o in outcomes if o.kept) or "—"
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
    defs = [o.definitions for o in outcomes if o.definitions is not None]
    if any(o.workload == "definitions" for o in outcomes):
        row = (f"| {now} | `{command}` | {nemesis} | {brokers} | {seconds:g} | {t.runs} | "
               f"{sum(d.changes for d in defs)} | {sum(d.acked for d in defs)} | "
               f"{sum(d.refused for d in defs)} | {sum(d.unknown for d in defs)} | "
               f"{t.divergent} | {t.lost_changes} | {t.tracebacks} | {passed}/{t.runs} | "
               f"{kept} |")
        _add_row(path, DEFS_SECTION, DEFS_INTRO, DEFS_HEADER, row)
        return
    row = (f"| {now} | `{command}` | {nemesis} | {queue_type} | {brokers} | {seconds:g} | "
           f"{t.runs} | {t.confirmed} | {t.lost} | {t.unexpected} | {t.duplicates} | "
           f"{t.unavailable_s:.1f} | {t.tracebacks} | {t.diverged} | {passed}/{t.runs} | "
           f"{kept} |")
    _add_row(path, SECTION, INTRO, HEADER, row)


def _add_row(path: Path, title: str, intro: str, header: str, row: str) -> None:
    text = path.read_text() if path.exists() else ""
    start = text.find("\n" + title)
    if start < 0:
        text = text.rstrip("\n") + f"\n\n{title}\n\n{intro}\n\n{header}\n{row}\n"
    else:
        nxt = text.find("\n## ", start + 1)
        end = len(text) if nxt < 0 else nxt
        section = text[start:end].rstrip("\n")
        if header.splitlines()[0] not in section:
            section += f"\n\n{header}"
        lines = section.split("\n")
        last_row = max(i for i, line in enumerate(lines) if line.startswith("|"))
        lines.insert(last_row + 1, row)
        section = "\n".join(lines) + "\n"
        rest = text[end:]
        text = text[:start] + section + ("\n" + rest.lstrip("\n") if rest else "")
    path.write_text(text)
