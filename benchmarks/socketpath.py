"""Instructions per message on the real socket path: a broker process under callgrind, amqbench
against it. ``python -m benchmarks.socketpath [--src DIR] [--cases 16b,1k,64k,...] [--seconds N]``.

``benchmarks.hotpath`` counts the core alone (frames fed from memory); this counts what a
broker spends in user space on a real socket: the event loop (uvloop), the reads and writes as
the I/O layer makes them, the core. So a change to the I/O layer (read buffers, ``writev``) that
the in-process harness cannot see shows here, in a figure that repeats from run to run, unlike
``make bench``'s timings on a shared machine (callgrind counts instructions, not time; the
kernel's work in the system calls is not counted).

Per case (amqbench's cases of ``benchmarks.amqbench``: one publisher and one consumer on one
queue): the broker starts under ``valgrind --tool=callgrind --instr-atstart=no`` (the start-up
uncounted), a 1 s amqbench warm-up runs, then instrumentation is switched on
(``callgrind_control -i on``), amqbench runs ``--seconds`` s (default 5), the counts are dumped
(``callgrind_control -d``: ``cg-CASE.out.1``, what ``--keep`` keeps for ``callgrind_annotate``)
and the broker stopped. Prints instructions per consumed message, and
the messages published and consumed (under callgrind the broker is ~50x slower: amqbench's
publisher is held back by TCP as in ``make bench``, where the broker is the bottleneck too).

``--src DIR`` runs the broker from another source tree (a ``git archive`` of a commit, for a
before/after: compiled when DIR holds a build in ``amqp_broker_native/_lib``, else pure Python;
``AMQP_BROKER_PURE=1`` forces pure). ``PYTHONHASHSEED=0`` unless set. Needs valgrind and
amqbench (``benchmarks.amqbench.build_amqbench``); raises ``SystemExit`` when a step fails.
Source: valgrind manual, "Callgrind: a call-graph generating cache and branch prediction
profiler" (``--instr-atstart``, ``callgrind_control``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.amqbench import CASES_BY_KEY, OUT_DIR, Case, build_amqbench, parse_amqbench
from benchmarks.processes import HOST, REPO_ROOT, free_port, stop_process, wait_for_port

__all__ = ["measure", "main"]

_TOTALS = re.compile(r"^(?:summary|totals): (\d+)", re.M)


def _control(*args: str) -> None:
    proc = subprocess.run(["callgrind_control", *args], capture_output=True, text=True, timeout=120)
    if proc.returncode:
        raise SystemExit(f"callgrind_control {' '.join(args)} failed: {proc.stderr or proc.stdout}")


def measure(amqbench: Path, case: Case, src: Path, seconds: int, workdir: Path
            ) -> tuple[float, dict[str, float]]:
    """One case: (instructions per consumed message, amqbench's figures). Raises
    ``SystemExit`` when the broker does not start or amqbench prints no figures."""
    port = free_port()
    data = workdir / f"data-{case.key}"
    data.mkdir()
    out = workdir / f"cg-{case.key}.out"
    env = {**os.environ, "PYTHONPATH": str(src),
           "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    log = open(workdir / f"broker-{case.key}.log", "wb")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         sys.executable, "-m", "amqp_broker", "--host", HOST, "--port", str(port),
         "--data-dir", str(data), "--log-level", "warning", "--management-port", "0",
         "--prometheus-port", "0"],
        cwd=src, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
    try:
        wait_for_port(port, proc, 600, "the broker under callgrind")
        bench = [str(amqbench), "--host", HOST, "--port", str(port), *case.args]
        subprocess.run([*bench, "--seconds", "1"], capture_output=True, timeout=600)
        _control("-i", "on", str(proc.pid))
        run = subprocess.run([*bench, "--seconds", str(seconds)], capture_output=True, text=True,
                             timeout=1800)
        _control("-d", str(proc.pid))
        _control("-i", "off", str(proc.pid))
    finally:
        stop_process(proc, grace=120)
        log.close()
    figures = parse_amqbench(run.stdout)
    if figures is None or not figures.get("consumed"):
        raise SystemExit(f"amqbench printed no figures (exit {run.returncode}): "
                         f"{run.stderr[-500:] or run.stdout[-500:]}")
    # the dump ``-d`` wrote (``.1``); the file written at exit holds the shutdown
    match = _TOTALS.search((workdir / f"cg-{case.key}.out.1").read_text())
    if match is None:
        raise SystemExit("no totals in the callgrind dump")
    total = int(match.group(1))
    return total / figures["consumed"], figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=REPO_ROOT,
                        help="the broker's source tree (default: this checkout)")
    parser.add_argument("--cases", default="16b,1k,64k",
                        help=f"comma-separated, of: {', '.join(CASES_BY_KEY)}")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the callgrind outputs and broker logs in this directory "
                             "(for callgrind_annotate)")
    args = parser.parse_args()
    amqbench = build_amqbench(OUT_DIR)
    if amqbench is None:
        raise SystemExit("amqbench cannot be built here")
    for key in args.cases.split(","):
        with tempfile.TemporaryDirectory() as d:
            work = Path(d)
            if args.keep is not None:
                work = args.keep.resolve() / key
                work.mkdir(parents=True)
            per, figures = measure(amqbench, CASES_BY_KEY[key], args.src.resolve(), args.seconds,
                                   work)
        print(f"{key}: {per:,.0f} instructions per message "
              f"(published {figures['published']:,.0f}, consumed {figures['consumed']:,.0f})",
              flush=True)


if __name__ == "__main__":
    main()
