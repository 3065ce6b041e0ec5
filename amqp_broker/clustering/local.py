"""``python -m amqp_broker.clustering.local`` (``make cluster``): a cluster of N brokers on this
machine, and their supervisor.

Starts N broker processes on 127.0.0.1, AMQP ports ``--base-port``.. (default 5701..), node names
n1..nN, data under ``<cluster dir>/nK`` (default ``<data dir>/cluster``), a shared secret made once
in ``<cluster dir>/cluster.secret``; n1 founds the cluster and the others join through it. Each
member's output goes to its own log, ``<cluster dir>/nK.log``. The management and Prometheus ports
are the ones the broker derives from its AMQP port (port + 10000 and + 10020: 15701 and 15721 for
5701; ``amqp_broker.config``). Once every member is in one agreed view it prints a table of each
member's pid, AMQP, management and Prometheus address, and then every new view the members agree
on (a failover shows as a view without the dead member, a rejoin as one with it again).

Supervision (issue 22 item 1): when a member exits the others keep serving. The supervisor prints
which member died, its pid, how (``n2 (pid 1234) died: killed by SIGKILL``, or its exit code), the
last lines of its log and the exact shell command that starts it again (same port, node name,
data dir and secret; no ``--seed`` once it has joined, since a restarted member tries the members
of its last view). It exits, stopping the others one at a time from the last to the first (each
SIGTERM is an orderly Cluster.Leave), on Ctrl-C or SIGTERM (a second one kills what is left), or
by itself once every member it started is dead (exit code 1; 0 after a signal).

A dead member stays down by default: trying failover (``kill -9`` a member, see the survivors
serve, see the new view) is the first thing people do with a local cluster, and an automatic
restart would undo it before it can be seen; the printed command brings it back when wanted.
``--restart`` restarts a dead member after ``--restart-delay`` seconds (default 5; long enough to
see the view without it), unless its AMQP port has been taken meanwhile (restarted by hand); a
member that dies within 10 s of a start 3 times in a row is left down. Members run in their own
session (a Ctrl-C in the terminal reaches only the supervisor, which stops them in order) and get
SIGTERM if the supervisor dies (Linux). A member restarted by hand is not the supervisor's child:
it is shown in the views but not stopped on exit. Source: issue "Peer clustering" ("a
three-broker cluster forms from a fresh clone by one documented command"), issue 22.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import sys
import time
from pathlib import Path

from ..config import DEFAULT_DATA_DIR, ConfigError
from .cli import broker_status
from .local_member import Member, exit_reason, log_tail

__all__ = ["main", "build_parser", "Supervisor"]

#: Seconds between looks at the members' processes.
POLL_S = 0.2
#: Seconds between looks at the members' agreed view.
VIEW_POLL_S = 2.0
#: Seconds after which a cluster that has not formed gets a warning (the supervisor goes on).
FORM_WARN_S = 60.0
#: A death within this many seconds of a start counts toward ``MAX_FAST_FAILURES``.
FAST_FAILURE_S = 10.0
MAX_FAST_FAILURES = 3


def say(*lines: str) -> None:
    """Print ``lines`` to stdout at once (the supervisor's output is read as it comes)."""
    print("\n".join(lines), flush=True)


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Supervisor:
    """Runs ``members`` (``Member``); ``restart_delay`` seconds before an automatic restart, or
    None to leave a dead member down. ``run()`` returns the exit code."""

    def __init__(self, members: list[Member], restart_delay: float | None) -> None:
        self.members = members
        self.restart_delay = restart_delay
        self.signals = 0
        self.formed = False
        self.last_view: tuple | None = None

    def on_signal(self, _signum: int, _frame: object) -> None:
        """SIGINT/SIGTERM: the first stops the cluster in order, a second kills what is left."""
        self.signals += 1
        if self.signals > 1:
            for m in self.members:
                if m.running() and m.proc is not None:
                    m.proc.kill()

    def seed(self, member: Member) -> str | None:
        """A running member other than ``member`` to join through (the first one), else None."""
        others = [m for m in self.members if m is not member and m.running()]
        return others[0].address if others else None

    def start_all(self) -> None:
        """n1 first (until its port accepts, at most 30 s), then the others seeding from it."""
        first, rest = self.members[0], self.members[1:]
        first.start()
        for _ in range(150):
            if self.signals or not first.running() or _port_taken(first.port):
                break
            time.sleep(0.2)
        for m in rest:
            if self.signals:
                return
            m.start(first.address)

    def reap(self) -> None:
        """Report members that died since the last look; schedule their restart (--restart)."""
        now = time.monotonic()
        for m in self.members:
            if m.proc is None or m.proc.poll() is None or m.reported_pid == m.proc.pid:
                continue
            m.reported_pid = m.proc.pid
            self.report_death(m)
            m.fast_failures = m.fast_failures + 1 if now - m.started_at < FAST_FAILURE_S else 0
            if self.restart_delay is None:
                continue
            if m.fast_failures >= MAX_FAST_FAILURES:
                say(f"{m.name} died {m.fast_failures} times within {FAST_FAILURE_S:g} s of "
                    "starting: not restarting it (see its log)")
                continue
            m.restart_at = now + self.restart_delay
            say(f"restarting {m.name} in {self.restart_delay:g} s (--restart)")

    def report_death(self, m: Member) -> None:
        """Print who died, how, its log's last lines and the command that restarts it."""
        assert m.proc is not None
        lines = [f"{m.name} (pid {m.proc.pid}) died: {exit_reason(m.proc.returncode)}",
                 f"  last lines of {m.log_path}:"]
        lines += [f"    {line}" for line in log_tail(m.log_path)] or ["    (empty)"]
        lines += ["  to restart it (in another terminal; the others keep serving):",
                  f"    {m.restart_command(self.seed(m))}"]
        say(*lines)

    def restart_due(self) -> None:
        """Start the members whose restart time has come (unless their port is taken)."""
        now = time.monotonic()
        for m in self.members:
            if m.restart_at is None or m.restart_at > now:
                continue
            if _port_taken(m.port):
                m.restart_at = None
                say(f"not restarting {m.name}: 127.0.0.1:{m.port} is in use (restarted by "
                    "hand?)")
                continue
            m.start(None if m.has_joined() else self.seed(m))
            say(f"{m.name} restarted (pid {m.pid})")

    def watch_view(self) -> None:
        """Ask every member for its view; print the table once all agree on a view of all of
        them, then each new view they agree on."""
        views = [broker_status(f"amqp://{m.address}/", 1.0) for m in self.members]
        up = [v for v in views if v.get("reachable") and v.get("cluster_view")]
        seen = {(v["cluster_view"], tuple(v["cluster_member_names"])) for v in up}
        if len(seen) != 1:
            return
        view = next(iter(seen))
        if not self.formed:
            if len(view[1]) != len(self.members) or len(up) != len(self.members):
                return
            self.formed = True
            self.print_table(view)
        elif view != self.last_view:
            names = ", ".join(view[1])
            say(f"view {view[0]}: {names} (leader {view[1][0]})")
        self.last_view = view

    def print_table(self, view: tuple) -> None:
        """The members' addresses once the cluster formed."""
        rows = [("member", "pid", "AMQP", "management", "Prometheus")]
        for m in self.members:
            rows.append((m.name, str(m.pid or "-"), *m.urls()))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        say(f"cluster of {len(self.members)} formed: view {view[0]}, leader {view[1][0]}",
            *("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
              for r in rows),
            f"clients: amqp://guest:guest@{self.members[0].address}/ (any member); "
            f"logs: {self.members[0].log_path.parent}/n*.log; Ctrl-C stops the cluster")

    def run(self) -> int:
        """Start, supervise until a signal or until every member is dead, stop in order."""
        start = time.monotonic()
        warned = False
        next_view = 0.0
        self.start_all()
        while not self.signals:
            self.reap()
            self.restart_due()
            if not any(m.running() or m.restart_at is not None for m in self.members):
                say("every member is dead: exiting")
                return 1
            now = time.monotonic()
            if now >= next_view:
                self.watch_view()
                next_view = time.monotonic() + (VIEW_POLL_S if self.formed else 0.5)
            if not self.formed and not warned and now - start > FORM_WARN_S:
                warned = True
                say(f"the cluster has not formed within {FORM_WARN_S:g} s; see the logs in "
                    f"{self.members[0].log_path.parent} (still waiting)")
            time.sleep(POLL_S)
        self.stop_all()
        return 0

    def stop_all(self) -> None:
        """Stop the running members from the last to the first, one at a time."""
        for m in reversed(self.members):
            if m.running():
                say(f"stopping {m.name} (pid {m.pid})")
                m.stop()


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m amqp_broker.clustering.local``."""
    p = argparse.ArgumentParser(prog="python -m amqp_broker.clustering.local",
                                description="Run and supervise a cluster of brokers on "
                                "127.0.0.1 (make cluster).")
    p.add_argument("--size", type=int, default=3, help="number of brokers (default 3)")
    p.add_argument("--base-port", type=int, default=5701,
                   help="first AMQP port (default 5701); management and Prometheus ports follow "
                   "each AMQP port (+10000, +10020)")
    p.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR / "cluster"),
                   help="the cluster's directory: secret, nK/ data dirs, nK.log logs (default "
                   "<data dir>/cluster)")
    p.add_argument("--restart", action="store_true",
                   help="restart a member that died (default: leave it down and print the "
                   "command that restarts it)")
    p.add_argument("--restart-delay", type=float, default=5.0, metavar="S",
                   help="seconds before an automatic restart (default 5; implies --restart "
                   "when given)")
    p.add_argument("--log-level", default="info",
                   choices=["debug", "info", "warning", "error"],
                   help="the members' log level, in their logs (default info)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the cluster until interrupted; returns the exit code (0 after Ctrl-C/SIGTERM, 1 when
    every member died, 2 for a bad argument)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.size < 1:
        parser.error("--size must be at least 1")
    raw = argv if argv is not None else sys.argv[1:]
    restart = args.restart or any(a.startswith("--restart-delay") for a in raw)
    base = Path(args.data_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    secret = base / "cluster.secret"
    if not secret.exists():
        secret.write_text(secrets.token_hex(32))
        os.chmod(secret, 0o600)
    members = [Member(f"n{i}", args.base_port + i - 1, base / f"n{i}", base / f"n{i}.log",
                      secret, args.log_level) for i in range(1, args.size + 1)]
    try:
        for m in members:
            m.config()
    except ConfigError as exc:
        parser.error(str(exc))
    say(f"starting {args.size} brokers on 127.0.0.1:{args.base_port}-"
        f"{args.base_port + args.size - 1}; logs: {base}/n*.log")
    sup = Supervisor(members, args.restart_delay if restart else None)
    signal.signal(signal.SIGTERM, sup.on_signal)
    signal.signal(signal.SIGINT, sup.on_signal)
    try:
        return sup.run()
    finally:
        sup.stop_all()


if __name__ == "__main__":
    sys.exit(main())
