"""The markdown tables of the cluster benchmarks (``benchmarks/cluster.py``)."""

from __future__ import annotations

import argparse
import datetime
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.cluster_cpu import CpuRun
from benchmarks.cluster_failover import ACTION, KillRun
from benchmarks.cluster_throughput import APART, ONE, TWO, TpRun


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def mean(values: Sequence[float]) -> float:
    good = [v for v in values if v == v]
    return sum(good) / len(good) if good else float("nan")


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def per_round(runs: Sequence[CpuRun | TpRun], size: int, base: str, other: str,
              value: Callable[[Any], float]) -> str:
    """', per round a–b×': the range of other/base within each round of ``size`` runs."""
    ratios = []
    for i in range(0, len(runs) - size + 1, size):
        group = runs[i:i + size]
        b = [value(r) for r in group if getattr(r, "case", getattr(r, "config", "")) == base]
        o = [value(r) for r in group if getattr(r, "case", getattr(r, "config", "")) == other]
        if b and o and b[0] == b[0] and o[0] == o[0] and b[0]:
            ratios.append(o[0] / b[0])
    if len(ratios) < 2:
        return ""
    return f", per round {min(ratios):.2f}–{max(ratios):.2f}×"


def summary_table(cpu: list[CpuRun], tp: list[TpRun], kills: list[KillRun], rate: int) -> str:
    rows = ["| measurement | result | aim | |", "|---|---|---|---|"]
    if cpu:
        local = [r for r in cpu if r.case == "local" and r.bench.figures]
        relayed = [r for r in cpu if r.case == "relayed" and r.bench.figures]
        lo = mean([r.total_us for r in local])
        re_ = mean([r.total_us for r in relayed])
        lo_a, lo_b = mean([r.us_per_msg(r.cpu_a) for r in local]), mean(
            [r.us_per_msg(r.cpu_b) for r in local])
        re_a, re_b = mean([r.us_per_msg(r.cpu_a) for r in relayed]), mean(
            [r.us_per_msg(r.cpu_b) for r in relayed])
        rows.append(f"| CPU µs/msg of both brokers, **local** (producer and consumer on A), "
                    f"{rate:,} msg/s, 1 KiB | {lo:.1f} (A {lo_a:.1f} + B {lo_b:.1f}) | | |")
        ratio = re_ / lo if lo else float("nan")
        rows.append(f"| CPU µs/msg of both brokers, **relayed** (producer on A, consumer on B) | "
                    f"{re_:.1f} (A {re_a:.1f} + B {re_b:.1f}) = **{ratio:.2f}×** local"
                    f"{per_round(cpu, 2, 'local', 'relayed', lambda r: r.total_us)} | ≤ 1.3× "
                    f"(issue 10) | {verdict(ratio <= 1.3)} |")
    if tp:
        def figures(config: str) -> tuple[float, str]:
            good = [r for r in tp if r.config == config and r.ok]
            rate = mean([r.rate for r in good])
            return rate, (f"brokers {mean([r.broker_cores for r in good]):.2f} cores, machine "
                          f"{mean([r.machine_busy for r in good]):.0%} busy, {len(good)} runs")

        r1, how1 = figures(ONE)
        r2, how2 = figures(TWO)
        r3, how3 = figures(APART)
        rows.append(f"| delivered msg/s, **1 broker**, 2 producers + 2 consumers, 1 KiB no-ack | "
                    f"{r1:,.0f} ({how1}) | | |")
        ratio = r2 / r1 if r1 else float("nan")
        spread = per_round(tp, 3, ONE, TWO, lambda r: r.rate if r.ok else float("nan"))
        rows.append(f"| delivered msg/s, **2 brokers**, 1 producer + 1 consumer on each, one shared "
                    f"queue | {r2:,.0f} = **{ratio:.2f}×**{spread} ({how2}) | ≥ 1.4× (issue 10) | "
                    f"{verdict(ratio >= 1.4)} |")
        rows.append(f"| for comparison: 2 brokers, 1 producer + 1 consumer on each, a queue of "
                    f"its own on each (nothing dealt across) | {r3:,.0f} = "
                    f"{r3 / r1 if r1 else float('nan'):.2f}× ({how3}) | | |")
    for action, pi in sorted({(k.action, k.ping_interval) for k in kills},
                             key=lambda x: (x[0] != "kill", -x[1])):
        for victim in ("member", "leader"):
            group = [k for k in kills
                     if k.action == action and k.ping_interval == pi and k.victim == victim]
            if not group:
                continue
            times = [k.seconds for k in group if k.seconds is not None]
            failed = len(group) - len(times)
            cell = (f"{min(times):.2f} / {median(times):.2f} / {max(times):.2f} s"
                    if times else "no new view")
            if failed:
                cell += f" ({failed} of {len(group)} kills gave no new view within 15 s)"
            default = " (the default)" if pi == 0.5 else ""
            aim, met = "", ""
            if action == "kill":
                aim = "< 2 s"
                met = verdict(not failed and bool(times) and max(times) < 2)
            rows.append(f"| {ACTION[action]} of the **{victim}** → new view on both survivors, "
                        f"3 brokers, ping interval {pi:g} s{default}, min / median / max of "
                        f"{len(group)} | {cell} | {aim} | {met} |")
    return "\n".join(rows)


def raw_tables(cpu: list[CpuRun], tp: list[TpRun], kills: list[KillRun]) -> str:
    parts = []
    if cpu:
        lines = ["| case | queue | exit | published | consumed | p50 / p99 µs | CPU A s | CPU B s "
                 "| µs/msg A + B | proxy µs/msg (not counted) |",
                 "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in cpu:
            f = r.bench.figures
            if f is None:
                lines.append(f"| {r.case} | {r.queue} | {r.bench.returncode} | failed: "
                             f"{r.bench.error} | | | | | | |")
                continue
            lines.append(
                f"| {r.case} | {r.queue} | {r.bench.returncode} | {f['published']:,.0f} | "
                f"{f['consumed']:,.0f} | {f['p50_us']:,.0f} / {f['p99_us']:,.0f} | {r.cpu_a:.2f} | "
                f"{r.cpu_b:.2f} | {r.us_per_msg(r.cpu_a):.1f} + {r.us_per_msg(r.cpu_b):.1f} = "
                f"{r.total_us:.1f} | {r.us_per_msg(r.cpu_proxy):.1f} |")
        parts.append("CPU per message, every run:\n\n" + "\n".join(lines))
    if tp:
        lines = ["| configuration | queue | attempt | delivered msg/s (window) | broker cores | "
                 "machine busy | amqbench: exit, published, consumed, consumed/s, p50 / p99 µs |",
                 "|---|---|---:|---:|---:|---:|---|"]
        for r in tp:
            benches = "<br>".join(
                f"exit {b.returncode}, {b.figures['published']:,.0f}, {b.figures['consumed']:,.0f},"
                f" {b.figures['consumed_per_s']:,.0f}/s, {b.figures['p50_us']:,.0f} / "
                f"{b.figures['p99_us']:,.0f}" if b.figures else f"failed: {b.error}"
                for b in r.benches)
            note = f"<br>**not counted**: {r.problem}" if r.problem else ""
            lines.append(f"| {r.config} | {r.queue} | {r.attempts} | {r.rate:,.0f} | "
                         f"{r.broker_cores:.2f} | {r.machine_busy:.0%} | {benches}{note} |")
        parts.append("Throughput, every run (2 brokers: one amqbench line per broker, A then B; "
                     "attempt > 1: the earlier ones did not count, see the docstring):"
                     "\n\n" + "\n".join(lines))
    if kills:
        lines = ["| signal | ping interval s | victim | signal → last survivor's new view s | "
                 "each survivor s |", "|---|---:|---|---:|---|"]
        for k in kills:
            each = ", ".join("—" if s is None else f"{s:.3f}" for s in k.per_survivor)
            took = "—" if k.seconds is None else f"{k.seconds:.3f}"
            lines.append(f"| {ACTION[k.action]} | {k.ping_interval:g} | {k.victim} | {took} | "
                         f"{each or k.error} |")
        parts.append("Failure detection, every kill:\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


def section(summary: str, raw: str, args: argparse.Namespace, started: datetime.datetime,
            lines: list[str]) -> str:
    info = [line for line in lines if not line.startswith("- RabbitMQ")]
    return "\n".join([
        "",
        f"## Cluster benchmarks, run of {started:%Y-%m-%d %H:%M} UTC",
        "",
        "Brokers on 127.0.0.2, .3, .4 in one cluster (shared secret, `--seed`), driven by amqbench. "
        "Reproduce with `python -m benchmarks.cluster` (options: `--help`; what each figure "
        "measures: the docstring of `benchmarks/cluster.py`).",
        "",
        *info,
        f"- CPU per message: {args.rate:,} msg/s for {args.seconds} s per run, "
        f"{args.rounds} runs per case; throughput: {args.seconds} s of publishing per run, "
        f"{args.rounds} runs per configuration; failure detection: {args.repeats} runs of each "
        f"kind per ping interval",
        "",
        summary,
        "",
        raw,
        "",
        "Notes: CPU µs/msg is the user + system CPU time of both broker processes during the run "
        "divided by the messages consumed (the proxy that splits amqbench's connections between "
        "A and B is in the benchmark process and not counted). Delivered msg/s is measured from "
        "the bytes the amqbench processes received (`ss`) between 1 s after the start and the end "
        "of publishing, summed over the processes; amqbench's own consumed/s is in the raw table "
        "(for two processes on one shared queue it includes one of them waiting out its 5 s "
        "drain). The machine has 2 cores shared by the brokers, amqbench and other work: compare "
        "the ratios of one run, not absolute figures across runs. The 1-broker throughput rows "
        "are a standalone (not clustered) broker. kill -9 on one machine: the kernel closes the "
        "killed broker's sockets, so its peers see the links drop at once; with SIGSTOP the "
        "sockets stay open and only the ring ping notices (a peer unheard for 3 ping intervals "
        "is suspected), as for a crashed machine or a cut cable.",
        "",
    ])
