"""``python -m interop_tests.faults``: parse options, make the namespaces, run, report.

    python -m interop_tests.faults [--nemesis NAME ...] [--seconds S] [--runs N]
        [--brokers 3|5] [--queue-type auto|classic|quorum|stream] [--work-dir D] [--keep]
        [--results FILE | --no-results] [--json FILE] [--broker-arg=--sync-policy=none ...]
        [--workload messages|definitions|both] [--delay-ms MS]

Prints a line per run, then exactly one last line (``report.summary_line``). Exit status: 0 when
every run was checked, lost nothing, delivered nothing unexpected and drained, no broker logged a
traceback and the quorum queue's replicas agreed (``RunOutcome.passed``); 1 otherwise; 2
when it could not run at all (no namespaces here, or the broker refused the queue type).
The namespaces are deleted on the way out, also after Ctrl-C or SIGTERM; those of earlier
harness processes that died are removed at the start.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import signal
import sys
import time
import warnings
from pathlib import Path
from types import FrameType

from .clients_common import ClientSettings
from .nemesis import NEMESES
from .netns import Network, enter_namespace, remove_stale, unavailable_reason
from .report import append_results, run_line, summary_line, totals
from .runner import RunConfig, RunOutcome, run_once

__all__ = ["build_parser", "main"]

REPO = Path(__file__).resolve().parents[2]
ORDER = ["kill", "pause", "partition-one", "partition-halves", "partition-ring", "link-flap",
         "mixed", "power-loss", "power-loss-majority", "power-loss-all", "corrupt",
         "kill-queue-leader", "kill-majority", "kill-all", "disk-full", "lossy-link",
         "membership"]


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m interop_tests.faults",
                                description="Jepsen-style fault injection against a cluster.")
    p.add_argument("--nemesis", action="append", choices=[*ORDER, "all"],
                   help="fault to inject (repeatable; default all, one after the other)")
    p.add_argument("--seconds", type=float, default=60.0, help="workload time per run, s")
    p.add_argument("--runs", type=int, default=1, help="runs per nemesis")
    p.add_argument("--brokers", type=int, choices=[3, 5], default=3)
    p.add_argument("--queue-type", choices=["auto", "classic", "quorum", "stream"],
                   default="auto",
                   help="auto: quorum when the broker serves it, else classic; stream: a "
                        "replicated stream read from x-stream-offset first (stream_check)")
    p.add_argument("--workload", choices=["messages", "definitions", "both"],
                   default="messages",
                   help="messages: publishers and consumers; definitions: clients declaring, "
                        "binding, deleting and changing users/permissions/policies on every "
                        "member (issue 23); both")
    p.add_argument("--delay-ms", type=int, default=0,
                   help="> 0: publish through an x-delayed-message exchange bound to the queue, "
                        "each message with this x-delay (issue 25's replicated delayed "
                        "messages); soak only, not in make test")
    p.add_argument("--rate", type=float, default=100.0, help="publishes/s per publisher")
    p.add_argument("--window", type=int, default=20, help="unconfirmed publishes per publisher")
    p.add_argument("--prefetch", type=int, default=50, help="consumer prefetch")
    p.add_argument("--ack-delay", type=float, default=0.005,
                   help="s a consumer waits before each ack (a slower consumer)")
    p.add_argument("--confirm-timeout", type=float, default=5.0,
                   help="s without a confirm before a publish is unknown")
    p.add_argument("--fault-s", type=float, default=4.0, help="s each fault lasts (about)")
    p.add_argument("--calm-s", type=float, default=3.0, help="s between faults")
    p.add_argument("--ping-interval", type=float, default=0.25, help="brokers' ring ping, s")
    p.add_argument("--broker-arg", action="append", default=[],
                   help="extra broker flag, e.g. --broker-arg=--sync-policy=none")
    p.add_argument("--broker-src", type=Path, default=None,
                   help="run the brokers from this source tree (e.g. a `git archive HEAD` "
                        "snapshot; default: the installed amqp_broker)")
    p.add_argument("--seed", type=int, default=None, help="nemesis RNG seed (default: time)")
    p.add_argument("--work-dir", type=Path, default=REPO / "data" / "faults",
                   help="where run directories go (kept ones are named in the output)")
    p.add_argument("--keep", action="store_true", help="keep every run's files")
    p.add_argument("--results", type=Path, default=REPO / "benchmarks" / "RESULTS.md")
    p.add_argument("--no-results", action="store_true", help="do not touch RESULTS.md")
    p.add_argument("--json", type=Path, default=None,
                   help="also write every run's outcome (RunOutcome.as_dict) to this file")
    return p


def _quiet_client_logs() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    # aio-pika's Connection.__del__ leaves a close() coroutine unawaited after a failed connect
    warnings.filterwarnings("ignore", message="coroutine .* was never awaited")
    for name in ("pika", "aio_pika", "aiormq", "asyncio"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the harness; returns the exit status (see the module docstring)."""
    args = build_parser().parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    nemeses = ORDER if not args.nemesis or "all" in args.nemesis else args.nemesis
    reason = unavailable_reason()
    if reason is not None:
        print(f"cannot run: {reason}", file=sys.stderr)
        print(summary_line([]))
        return 2
    _quiet_client_logs()
    signal.signal(signal.SIGTERM, _on_sigterm)
    for name in remove_stale():
        print(f"removed stale namespace {name}", file=sys.stderr)
    settings = ClientSettings(rate=args.rate, window=args.window, prefetch=args.prefetch,
                              ack_delay=args.ack_delay, confirm_timeout=args.confirm_timeout,
                              exchange="jepsen.delayed" if args.delay_ms > 0 else "",
                              delay_ms=max(args.delay_ms, 0))
    seed = int(time.time()) if args.seed is None else args.seed
    net = Network(args.brokers)
    outcomes: list[RunOutcome] = []
    queue_type = args.queue_type
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        net.create()
        enter_namespace(net.hub)
        for name in nemeses:
            assert name in NEMESES
            these: list[RunOutcome] = []
            for k in range(args.runs):
                cfg = RunConfig(name, args.seconds, settings, seed + len(outcomes), queue_type,
                                args.ping_interval, tuple(args.broker_arg), args.fault_s,
                                args.calm_s, args.keep,
                                args.broker_src and args.broker_src.resolve(),
                                workload=args.workload)
                run_dir = args.work_dir / f"{stamp}-{name}-{k + 1}"
                outcome = run_once(cfg, net, run_dir)
                these.append(outcome)
                outcomes.append(outcome)
                print(run_line(k + 1, args.runs, outcome), flush=True)
                if outcome.refused:
                    print(f"the broker refused x-queue-type: {outcome.queue_type} "
                          f"({outcome.refused}); replicated queues are not served yet",
                          file=sys.stderr)
                    print(summary_line(outcomes))
                    return 2
                queue_type = outcome.queue_type
            if not args.no_results:
                command = "python -m interop_tests.faults " + shlex.join(argv)
                append_results(args.results, command, name, queue_type, args.brokers,
                               args.seconds, these)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
    finally:
        net.destroy()
        if args.json is not None:
            args.json.write_text(json.dumps([o.as_dict() for o in outcomes], indent=2) + "\n")
    print(summary_line(outcomes))
    t = totals(outcomes)
    ok = (t.lost == 0 and t.unexpected == 0 and outcomes and len(outcomes) ==
          len(nemeses) * args.runs and all(o.passed for o in outcomes))
    return 0 if ok else 1
