"""One run of the harness: cluster up, workload under a nemesis, heal, drain, check.

The phases follow RabbitMQ's Jepsen test (rabbitmq/jepsen, ``rabbit-test``): the workload and
the nemesis's start/stop cycles for the time limit; then the nemesis stops (heal every cut,
SIGCONT, restart the dead); wait for recovery (here: one agreed view of every broker, read as
``amqp-broker cluster-status`` reads it); then every client drains. The checker
(:mod:`interop_tests.faults.checker`) counts the history.

A run's directory holds the brokers' data dirs and logs; it is kept, with ``history.jsonl``
(every operation), ``views.jsonl`` (the view changes) and ``result.json``, when the run fails
(lost or unexpected messages, a queue not empty after the drain, an error) or when asked to;
otherwise it is removed.
"""

from __future__ import annotations

import json
import random
import shutil
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import corrupt, diskfull, kills, lossy, membership  # noqa: F401  (they add nemeses)
from .brokers import Brokers, ViewMonitor
from .checker import Result, check
from .clients_common import ClientSettings
from .defs_check import DefinitionsResult
from .defs_workload import DefinitionsWorkload
from .history import History
from .logscan import LogFindings, scan_logs
from .nemesis import NEEDS_DISK, NEEDS_LAZYFS, Context, run_schedule
from .netns import Network
from .replicas import GroupReport, compare_groups
from .stream_check import StreamResult, check_stream
from .stream_replicas import compare_segments
from .workload import QueueRefused, Workload, declare_queue, drain, serves_quorum

__all__ = ["RunConfig", "RunOutcome", "run_once", "QUIET_S"]

#: Seconds every broker stays up and idle after the drain before the replicas are read: the
#: drain's last acknowledgements and cancels are log entries too, and a follower gets them a
#: heartbeat (0.1 s) or a rejected probe later -- read at once, one was reported one entry
#: behind (a false ``lagging``).
QUIET_S = 1.0


@dataclass(frozen=True)
class RunConfig:
    """Settings of one run: ``nemesis`` name, ``seconds`` of workload, ``settings`` of the
    clients, ``seed`` of the nemesis's RNG, ``queue_type`` ``classic``, ``quorum``, ``stream`` (a
    replicated stream read from ``first``: ``stream_check``) or ``auto`` (quorum when the broker
    serves it, else classic), broker ``ping_interval`` (s), ``broker_args`` passed
    to every broker, ``fault_s`` / ``calm_s`` the nemesis cycle (s), ``keep`` the run's files
    even when it passes, ``broker_src`` a source tree to run the brokers from (default the
    installed package), ``agree_timeout`` / ``drain_timeout`` (s) bounds of the final phases;
    ``workload``: ``messages`` (publishers and consumers), ``definitions`` (clients changing
    definitions on every member, :mod:`interop_tests.faults.defs_workload`) or ``both``."""

    nemesis: str
    seconds: float
    settings: ClientSettings
    seed: int
    queue_type: str = "classic"
    ping_interval: float = 0.25
    broker_args: tuple[str, ...] = ()
    fault_s: float = 4.0
    calm_s: float = 3.0
    keep: bool = False
    broker_src: Path | None = None
    agree_timeout: float = 60.0
    drain_timeout: float = 90.0
    workload: str = "messages"


@dataclass
class RunOutcome:
    """What one run found: ``result`` (None when it did not get to the check), ``depths`` (queue
    depth per broker after the drain), ``faults`` injected, ``error`` (text) if the harness
    failed, ``refused`` (the broker's reply) if the queue could not be declared, ``queue_type`` the one
    used, ``run_dir``
    and whether it was ``kept``; ``seconds`` the run's wall time; ``replicas``: the comparison of
    each quorum queue's replicas read from their files after the drain
    (:mod:`interop_tests.faults.replicas`); ``logs``: tracebacks and detected replica losses in
    the brokers' logs (:mod:`interop_tests.faults.logscan`); ``workload`` (``RunConfig``) and,
    for the definitions workload, ``definitions``: its counts
    (:class:`~interop_tests.faults.defs_check.DefinitionsResult`); for a stream, ``stream``: what
    its readers saw (:class:`~interop_tests.faults.stream_check.StreamResult`), and ``replicas``
    also holds the comparison of every broker's segment files
    (:mod:`interop_tests.faults.stream_replicas`)."""

    nemesis: str
    run_dir: Path
    queue_type: str = "classic"
    result: Result | None = None
    depths: dict[str, int | None] = field(default_factory=dict)
    faults: int = 0
    error: str | None = None
    refused: str | None = None
    kept: bool = False
    seconds: float = 0.0
    replicas: list[GroupReport] = field(default_factory=list)
    logs: LogFindings = field(default_factory=LogFindings)
    workload: str = "messages"
    definitions: DefinitionsResult | None = None
    stream: StreamResult | None = None

    @property
    def tracebacks(self) -> int:
        """Python tracebacks in the brokers' logs (each one a failure)."""
        return self.logs.traceback_count

    @property
    def replica_problems(self) -> list[str]:
        """What the replica comparison found wrong (divergence, different states, lagging)."""
        return [p for report in self.replicas for p in report.problems]

    @property
    def drained(self) -> bool:
        """True when every broker reported the queue empty after the drain."""
        return bool(self.depths) and all(d == 0 for d in self.depths.values())

    @property
    def passed(self) -> bool:
        """Checked, valid (no loss, nothing unexpected), drained, no harness error, no traceback
        in a broker's log, replicas that agree, and a real test: at least one fault injected
        and one publish confirmed; a stream's readers saw one log in order
        (``StreamResult.valid``). With the definitions workload: every member's definitions
        read, none differing, no acknowledged change lost, at least one change acknowledged."""
        messages = self.workload == "definitions" or (
            self.result is not None and self.result.valid and self.drained
            and self.result.confirmed > 0)
        defs = self.workload == "messages" or (
            self.definitions is not None and self.definitions.valid
            and self.definitions.acked > 0)
        stream = self.stream is None or self.stream.valid
        return (self.error is None and self.refused is None and messages and defs and stream
                and self.faults > 0 and self.tracebacks == 0 and not self.replica_problems)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"nemesis": self.nemesis, "queue_type": self.queue_type, "run_dir": str(self.run_dir), "faults": self.faults,
                "depths": self.depths, "error": self.error, "refused": self.refused,
                "seconds": round(self.seconds, 1), "passed": self.passed,
                "result": None if self.result is None else self.result.as_dict(),
                "tracebacks": self.tracebacks, "logs": self.logs.as_dict(),
                "replicas": [r.as_dict() for r in self.replicas], "workload": self.workload,
                "definitions": None if self.definitions is None else self.definitions.as_dict(),
                "stream": None if self.stream is None else self.stream.as_dict()}


def _stop_publishers(workload: Workload, settings: ClientSettings) -> None:
    workload.stop_publishers()
    deadline = time.monotonic() + settings.confirm_timeout + 3
    for t in workload.threads:
        if t.name.startswith("pub-"):
            t.join(max(0.0, deadline - time.monotonic()))
    time.sleep(max(0.0, min(1.0, deadline - time.monotonic())))


def run_once(cfg: RunConfig, net: Network, run_dir: Path) -> RunOutcome:
    """Run once in ``net`` (created, the caller in its hub namespace), files under ``run_dir``
    (made here). Never raises for a failure of the brokers or clients (it is the outcome's
    ``error``); ``KeyboardInterrupt`` propagates after cleanup."""
    began = time.monotonic()
    run_dir.mkdir(parents=True, exist_ok=True)
    history = History()
    outcome = RunOutcome(cfg.nemesis, run_dir, workload=cfg.workload)
    messages = cfg.workload != "definitions"
    brokers = Brokers(net, run_dir, history, cfg.broker_args, cfg.ping_interval, cfg.broker_src,
                      lazyfs=cfg.nemesis in NEEDS_LAZYFS,
                      disk=((diskfull.DISK_BYTES, diskfull.DISK_FREE_LIMIT)
                            if cfg.nemesis in NEEDS_DISK else None))
    monitor = ViewMonitor(brokers, history)
    settings = cfg.settings
    workload = Workload(brokers, settings, history)
    ctx = Context(brokers, net, history, random.Random(cfg.seed), threading.Event())
    defs = DefinitionsWorkload(brokers, history, cfg.seed) if cfg.workload != "messages" else None
    started = False
    try:
        brokers.start_all(cfg.agree_timeout)
        outcome.queue_type = cfg.queue_type
        if cfg.queue_type == "auto":
            quorum = serves_quorum(brokers[0].url, settings)
            outcome.queue_type = "quorum" if quorum else "classic"
        if outcome.queue_type in ("quorum", "stream"):
            settings = replace(settings, queue_args={"x-queue-type": outcome.queue_type},
                               stream=outcome.queue_type == "stream")
            workload.settings = settings
        history.record("phase", phase="queue", queue_type=outcome.queue_type)
        ctx.queue, ctx.queue_type = settings.queue, outcome.queue_type
        try:
            declare_queue(brokers[0].url, settings)
        except QueueRefused as exc:
            outcome.refused = str(exc)
            return outcome
        monitor.start()
        history.record("phase", phase="workload-start")
        if messages:
            workload.start()
        if defs is not None:
            defs.start()
        started = True
        outcome.faults = run_schedule(ctx, cfg.nemesis, cfg.seconds, cfg.fault_s, cfg.calm_s)
        ctx.sleep(cfg.seconds - history.now() + _start_of(history))
        history.record("phase", phase="workload-stop")
        if defs is not None:
            defs.stop()
        _stop_publishers(workload, settings)
        net.heal()
        restarted = brokers.heal()
        history.record("phase", phase="heal", restarted=[brokers[i].name for i in restarted])
        took = brokers.wait_agreed(cfg.agree_timeout)
        history.record("phase", phase="agreed", after_s=round(took, 3))
        if defs is not None:
            outcome.definitions = defs.check()
        if messages:
            workload.close()
            outcome.depths = drain(brokers, settings, history, timeout=cfg.drain_timeout)
            outcome.result = check(history.events())
            if settings.stream:
                outcome.stream = check_stream(history.events(),
                                              [b.name for b in brokers.brokers])
        if outcome.queue_type in ("quorum", "stream"):
            time.sleep(QUIET_S)
            for b in brokers.brokers:    # stopped, so that their files are read as they are
                brokers.kill(b.index)
            data_dirs = {b.name: b.data_dir for b in brokers.brokers}
            outcome.replicas = compare_groups(data_dirs, stream=settings.stream)
            if settings.stream:
                outcome.replicas.append(compare_segments(data_dirs, settings.queue))
            history.record("phase", phase="replicas",
                           problems=[p for r in outcome.replicas for p in r.problems])
    except Exception:
        outcome.error = traceback.format_exc(limit=6)
    finally:
        ctx.abort.set()
        monitor.stop()
        if started and messages:
            workload.close(timeout=5)
        if defs is not None:
            defs.stop(timeout=5)
        brokers.stop_all()
        net.heal()
        outcome.logs = scan_logs({b.name: b.log_path for b in brokers.brokers})
        outcome.seconds = time.monotonic() - began
        _keep_or_remove(cfg, outcome, history)
    return outcome


def _start_of(history: History) -> float:
    for e in history.events():
        if e["op"] == "phase" and e.get("phase") == "workload-start":
            return float(e["t"])
    return 0.0


def _keep_or_remove(cfg: RunConfig, outcome: RunOutcome, history: History) -> None:
    if outcome.passed and not cfg.keep:
        shutil.rmtree(outcome.run_dir, ignore_errors=True)
        return
    outcome.kept = True
    history.write(outcome.run_dir / "history.jsonl")
    with open(outcome.run_dir / "views.jsonl", "w") as f:
        for e in history.events():
            if e["op"] in ("view", "nemesis", "phase"):
                f.write(json.dumps(e) + "\n")
    (outcome.run_dir / "result.json").write_text(json.dumps(outcome.as_dict(), indent=2) + "\n")
    for b in Path(outcome.run_dir).iterdir():   # data dirs are big and not needed to diagnose
        if (b.is_dir() or b.suffix == ".img") and not cfg.keep:   # .img: loop disks
            shutil.rmtree(b, ignore_errors=True)
