"""Side-by-side benchmark: our broker against RabbitMQ, both driven by amqbench.

``python -m benchmarks.run`` (or ``make bench``) from the repository root:

1. builds amqbench (a C load generator on rabbitmq-c, ``../shared/bench``) into ``benchmarks/out/``,
   and manyqueues (``benchmarks/manyqueues.c``, the same for many queues) beside it;
2. starts our broker as a real process (``python -m amqp_broker``) on a free port, data in a temp dir;
3. starts a private RabbitMQ node (its own node name, ports, data and log dirs) when
   ``rabbitmq-server`` is installed, and stops it at the end;
4. runs each case against both brokers one right after the other, alternating which goes first, so
   that both see the same machine noise; measures our broker's (and RabbitMQ's) CPU time per
   message from the process's CPU times;
5. prints a markdown table and rewrites ``benchmarks/RESULTS.md`` with it.

Every process started here is stopped in a ``finally`` and every wait is bounded.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks import processes
from benchmarks.amqbench import (
    CASES,
    CASES_BY_KEY,
    OUT_DIR,
    WARMUP,
    Case,
    Result,
    build_amqbench,
    build_manyqueues,
    run_amqbench,
)
from benchmarks.processes import REPO_ROOT, Broker, OurBroker, RabbitMQ, stop_brokers, tail
from benchmarks.report import RESULTS_MD, machine_info, markdown_table, notes, write_results


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description="Benchmark our broker against RabbitMQ with amqbench; writes benchmarks/RESULTS.md.",
    )
    parser.add_argument(
        "--seconds", type=int, default=5, help="publishing time per case, 1-60 (default 5)"
    )
    parser.add_argument(
        "--cases",
        default=",".join(c.key for c in CASES),
        help="comma-separated cases to run, from: " + ", ".join(c.key for c in CASES),
    )
    parser.add_argument("--no-rabbitmq", action="store_true", help="measure our broker only")
    parser.add_argument(
        "--our-args", default="", help="extra command-line arguments for our broker"
    )
    parser.add_argument(
        "--amqbench", type=Path, help="use this amqbench binary instead of building one"
    )
    parser.add_argument(
        "--no-warmup", action="store_true", help="skip the 1 s warm-up run per broker"
    )
    parser.add_argument("--no-write", action="store_true", help=f"do not rewrite {RESULTS_MD.name}")
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="run every case this many times, alternating which broker goes first from round to "
             "round; the table gives each broker's median run (default 1)")
    args = parser.parse_args(argv)
    if not 1 <= args.seconds <= 60:
        parser.error("--seconds must be between 1 and 60 (amqbench's limit)")
    if not 1 <= args.rounds <= 20:
        parser.error("--rounds must be between 1 and 20")
    keys = [k.strip() for k in args.cases.split(",") if k.strip()]
    unknown = [k for k in keys if k not in CASES_BY_KEY]
    if unknown or not keys:
        parser.error(f"unknown case(s) {unknown}; choose from {', '.join(CASES_BY_KEY)}")
    args.case_list = [CASES_BY_KEY[k] for k in keys]
    return args


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop our processes


def describe(result: Result) -> str:
    """One progress line for a run."""
    if not result.ok:
        return f"FAILED: {result.error}"
    f = result.figures
    cpu = f", CPU {result.cpu_us_per_msg:.1f} µs/msg" if result.cpu_us_per_msg is not None else ""
    lost = f", {result.lost:,} NOT CONSUMED (exit {result.returncode})" if result.lost else ""
    return (
        f"{f['consumed_per_s']:,.0f} msg/s, p50 {f['p50_us']:,.0f} µs, p99 {f['p99_us']:,.0f} µs"
        f"{cpu}{lost}"
    )


def median_result(results: Sequence[Result]) -> Result:
    """The run of median consumed msg/s among those that printed figures (the lower of the two
    middle ones for an even count); the last run when none did."""
    ok = sorted((r for r in results if r.ok), key=lambda r: r.figures["consumed_per_s"])
    return ok[(len(ok) - 1) // 2] if ok else results[-1]


def _run_case(tools: dict[str, Path], broker: Broker, ours: OurBroker, case: Case,
              seconds: int, odd: list[str]) -> Result | None:
    """One run of ``case`` against ``broker`` (our broker restarted first if it had exited; None
    when RabbitMQ is not running), its progress line printed."""
    if not broker.alive():
        if broker is not ours:
            odd.append(f"{broker.label} was not running for {case.title}")
            return None
        odd.append(f"our broker had exited (see its log); restarted before {case.title}")
        print(f"our broker exited:\n{tail(ours.log_path)}\nrestarting", flush=True)
        ours.stop()
        ours.start()
    print(f"{case.title}, {broker.label} ...", end=" ", flush=True)
    r = run_amqbench(tools[case.tool], broker, case, seconds)
    if not broker.alive():
        r.error = (r.error + "; " if r.error else "") + f"{broker.label} exited during the run"
    print(describe(r), flush=True)
    time.sleep(1)
    return r


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; returns the exit status (0 also when skipped for lack of amqbench)."""
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    if processes.psutil is None:
        print("psutil is not installed: CPU per message is not measured (pip install psutil).")

    binary = args.amqbench or build_amqbench(OUT_DIR)
    if binary is None:
        return 0
    tools = {"amqbench": binary}
    if any(case.tool == "manyqueues" for case in args.case_list):
        tools["manyqueues"] = build_manyqueues(OUT_DIR)

    workdir = Path(tempfile.mkdtemp(prefix="amqbench-ours-"))
    ours = OurBroker(workdir, shlex.split(args.our_args))
    rabbit: RabbitMQ | None = None
    odd: list[str] = []
    try:
        ours.start()
        print(f"our broker: pid {ours.proc.pid}, port {ours.port}", flush=True)
        brokers: list[Broker] = [ours]
        if args.no_rabbitmq:
            print("RabbitMQ: skipped (--no-rabbitmq)")
        else:
            candidate = RabbitMQ()
            if not candidate.installed():
                print("RabbitMQ: skipped (rabbitmq-server not installed)")
            else:
                print(f"starting RabbitMQ node {candidate.node} ...", flush=True)
                rabbit = candidate  # stopped in finally even if start fails half-way
                try:
                    rabbit.start()
                except RuntimeError as exc:
                    print(f"RabbitMQ: skipped, could not start: {exc}")
                    odd.append(f"RabbitMQ could not start: {str(exc).splitlines()[0]}")
                    rabbit.stop()
                    rabbit = None
                else:
                    print(f"RabbitMQ {rabbit.version}: port {rabbit.port}", flush=True)
                    brokers.append(rabbit)
        info = machine_info(rabbit)

        if not args.no_warmup:
            for broker in brokers:
                r = run_amqbench(binary, broker, WARMUP, 1)
                print(f"warm-up, {broker.label}: {describe(r)}", flush=True)

        runs: dict[tuple[str, str], list[Result]] = {}
        for rnd in range(args.rounds):
            if args.rounds > 1:
                print(f"round {rnd + 1} of {args.rounds}", flush=True)
            for i, case in enumerate(args.case_list):
                order = brokers if (i + rnd) % 2 == 0 else brokers[::-1]
                for broker in order:
                    r = _run_case(tools, broker, ours, case, args.seconds, odd)
                    if r is not None:
                        runs.setdefault((case.key, broker.label), []).append(r)
        results = {key: median_result(rs) for key, rs in runs.items()}
        if args.rounds > 1:
            odd.append(f"each figure is the median of {args.rounds} rounds (by consumed msg/s); "
                       "the brokers alternated going first from round to round")

        table = markdown_table(args.case_list, results)
        odd = notes(args.case_list, results, odd)
        print()
        print(table)
        if odd:
            print("\nNotes:\n" + "\n".join(f"- {n}" for n in odd))
        if not args.no_write:
            write_results(RESULTS_MD, args, args.case_list, results, info, odd)
            print(f"\nwrote {RESULTS_MD.relative_to(REPO_ROOT)}")
        return 0
    finally:
        stop_brokers(ours, rabbit, workdir)


if __name__ == "__main__":
    sys.exit(main())
