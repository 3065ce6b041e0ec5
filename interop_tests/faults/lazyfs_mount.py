"""The harness's side of :mod:`interop_tests.faults.lazyfs`: mount it, cut the power, unmount.

A :class:`LazyMount` runs ``python -m interop_tests.faults.lazyfs_daemon MOUNTPOINT BACKING
STATE`` as a child process talking over its stdin/stdout (one command, one JSON line), its stderr
appended to a log file. Mount it in the mount namespace the brokers are started from, before they start:
``ip netns exec`` gives each broker a copy of that namespace taken at its start (iproute2's
netns_switch unshares the mount namespace to remount /sys), so a mount made earlier is seen
through the copy, and the FUSE process itself may sit in any network namespace.
Every wait is bounded; failures raise :class:`LazyFSError` with the log's tail.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import json
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

__all__ = ["LazyFSError", "LazyMount", "unavailable_reason"]

REPO = Path(__file__).resolve().parents[2]


class LazyFSError(RuntimeError):
    """The file system did not mount, answer or unmount (message: what, and its log's tail)."""


def unavailable_reason() -> str | None:
    """Why the file system cannot run here (None when it can): needs /dev/fuse, fusermount3 and
    libfuse3 (Debian's fuse3, interop_tests/setup.sh), and mfusepy (pyproject's test extra)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None or ctypes.util.find_library("fuse3") is None:
        return "fuse3 is not installed (fusermount3, libfuse3): run interop_tests/setup.sh"
    if importlib.util.find_spec("mfusepy") is None:
        return "mfusepy is not installed (pip install -e '.[test]')"
    return None


class LazyMount:
    """One lazyfs mount: ``mountpoint`` (the broker's data dir), ``backing`` (where the bytes
    are, beside it), ``state`` (its trash and stage, same file system), ``log`` (stderr)."""

    def __init__(self, mountpoint: Path, backing: Path, state: Path, log: Path) -> None:
        self.mountpoint = mountpoint
        self.backing = backing
        self.state = state
        self.log = log
        self.proc: subprocess.Popen[str] | None = None

    @property
    def mounted(self) -> bool:
        """True while the FUSE process runs."""
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 15.0) -> None:
        """Mount and wait (at most ``timeout`` s) until the kernel has the mount. Raises
        ``LazyFSError``."""
        if self.mounted:
            return
        for d in (self.mountpoint, self.backing, self.state):
            d.mkdir(parents=True, exist_ok=True)
        with open(self.log, "a") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "interop_tests.faults.lazyfs_daemon", str(self.mountpoint),
                 str(self.backing), str(self.state)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                cwd=REPO, start_new_session=True)
        answer = self._read(timeout)
        if not answer.get("ready"):
            self.stop()
            raise LazyFSError(f"lazyfs did not mount {self.mountpoint}: {answer}\n{self._tail()}")

    def command(self, cmd: str, timeout: float = 30.0) -> dict[str, Any]:
        """Send ``cmd`` (``drop`` or ``pending``), return its JSON answer. Raises
        ``LazyFSError``."""
        if not self.mounted:
            raise LazyFSError(f"lazyfs at {self.mountpoint} is not running\n{self._tail()}")
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        answer = self._read(timeout)
        if "error" in answer:
            raise LazyFSError(f"lazyfs {cmd}: {answer['error']}\n{self._tail()}")
        return answer

    def power_loss(self) -> dict[str, Any]:
        """Drop every write not fsynced (kill the process using it first): the counts of
        :meth:`interop_tests.faults.lazyfs.LazyFS.drop`."""
        return self.command("drop")

    def stop(self, timeout: float = 10.0) -> None:
        """Unmount (lazily) and end the process (killed after ``timeout`` s); never raises."""
        proc, self.proc = self.proc, None
        try:
            subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)],
                           capture_output=True, check=False, timeout=20)
            if proc is None:
                return
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            if proc.stdout is not None:
                proc.stdout.close()
        except (OSError, subprocess.SubprocessError):
            pass

    def _read(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        out: IO[str] = self.proc.stdout
        ready, _, _ = select.select([out], [], [], timeout)
        line = out.readline() if ready else ""
        if not line:
            state = "exited" if self.proc.poll() is not None else f"silent {timeout:g} s"
            raise LazyFSError(f"lazyfs at {self.mountpoint} {state}\n{self._tail()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
