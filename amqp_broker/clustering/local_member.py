"""One member of ``make cluster`` (``clustering.local``): its command line, process, log and ports.

A ``Member`` is a broker process on 127.0.0.1 with its own AMQP port, node name and data directory,
the cluster's shared secret, and its output (stdout and stderr) appended to its own log file
(``<cluster dir>/nK.log``). Its management and Prometheus ports are what ``amqp_broker.config``
derives from its AMQP port (port + 10000, port + 10020) unless the environment
(``AMQP_BROKER_MANAGEMENT_PORT`` ...) sets them: ``ports()`` asks ``load_config`` with the same
flags, so what ``make cluster`` prints is what the broker binds. After its first join a member's
data directory holds its vote (``runtime.VOTE_FILE``) and a restart needs no ``--seed``: it tries
the members of its last view (docs/clustering.md, "Restart of a majority"); before that the restart command
seeds from a member. Source: issue 22 item 1.
"""

from __future__ import annotations

import ctypes
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Config, load_config
from .runtime import VOTE_FILE

__all__ = ["Member", "exit_reason", "log_tail", "TAIL_LINES"]

#: Lines of a dead member's log the supervisor shows.
TAIL_LINES = 12
#: Bytes read from the end of a log to find them.
_TAIL_BYTES = 16384
_PR_SET_PDEATHSIG = 1


def exit_reason(returncode: int) -> str:
    """How a process ended, from ``Popen.returncode``: "killed by SIGKILL" (negative: a signal),
    "exited with code 1"."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with code {returncode}"


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of the text file ``path`` (at most its last 16 KiB); [] when it
    cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - _TAIL_BYTES))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the supervisor dies, so a killed supervisor
    leaves no brokers behind (a SIGTERM is an orderly leave)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


@dataclass
class Member:
    """Broker ``name`` on 127.0.0.1:``port`` (data in ``data_dir``, output appended to
    ``log_path``), a member of the cluster whose shared secret is the file ``secret``."""

    name: str
    port: int
    data_dir: Path
    log_path: Path
    secret: Path
    log_level: str = "info"
    proc: subprocess.Popen | None = None
    #: time.monotonic() of the last start
    started_at: float = 0.0
    #: consecutive deaths soon after a start (see ``clustering.local``)
    fast_failures: int = 0
    #: time.monotonic() at which the supervisor restarts it (--restart), or None
    restart_at: float | None = None
    #: pid of the last start whose death the supervisor reported
    reported_pid: int | None = None
    _config: Config | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        """Its listen address (always 127.0.0.1)."""
        return "127.0.0.1"

    @property
    def address(self) -> str:
        """``127.0.0.1:port``, as a ``--seed`` and as cluster-status prints it."""
        return f"{self.host}:{self.port}"

    def argv(self, seed: str | None = None) -> list[str]:
        """The broker's command line (absolute paths; this Python), seeding from ``seed``
        (``host:port``) when given."""
        cmd = [sys.executable, "-m", "amqp_broker", *self.flags()]
        if seed:
            cmd += ["--seed", seed]
        return cmd

    def flags(self) -> list[str]:
        """Its run flags without ``--seed``."""
        return ["--port", str(self.port), "--node-name", self.name, "--data-dir",
                str(self.data_dir.resolve()), "--cluster-secret", str(self.secret.resolve()),
                "--log-level", self.log_level]

    def config(self) -> Config:
        """Its configuration as the broker sees it (flags over this environment). Raises
        ``ConfigError`` (a port whose derived ports are above 65535, ...)."""
        if self._config is None:
            self._config = load_config(self.flags())
        return self._config

    def has_joined(self) -> bool:
        """True once its data directory holds its membership vote (it joined a view once)."""
        return (self.data_dir / VOTE_FILE).exists()

    def restart_command(self, seed: str | None) -> str:
        """The shell command that starts it again as it was (same port, node name, data dir,
        secret); ``--seed`` only while it never joined (``has_joined``)."""
        return shlex.join(self.argv(None if self.has_joined() else seed))

    def start(self, seed: str | None = None) -> None:
        """Start the process (its own session, so a Ctrl-C in the terminal reaches only the
        supervisor), output appended to ``log_path`` after a header line. Raises ``OSError``."""
        cmd = self.argv(seed)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} {shlex.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         preexec_fn=_die_with_parent)
        self.started_at = time.monotonic()
        self.restart_at = None

    @property
    def pid(self) -> int | None:
        """The process id of its last start, None before."""
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        """True while the process it started is alive."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (the broker leaves the cluster in order), wait up to ``timeout`` s, then
        SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def urls(self) -> tuple[str, str, str]:
        """(AMQP URI, management URL, Prometheus URL); "off" for a listener whose port is 0."""
        config = self.config()
        mgmt, prom = config.management_port, config.prometheus_port
        scheme = "https" if config.management_tls else "http"
        return (f"amqp://{self.address}/",
                f"{scheme}://{self.host}:{mgmt}/" if mgmt else "off",
                f"http://{self.host}:{prom}/metrics" if prom else "off")
