"""Start and stop a Celery worker process of ``interop_tests.celery_app`` (shared by the kombu /
Celery interop tests and the quorum-queue cluster test). Every wait is bounded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["start_worker", "stop_worker"]

REPO_ROOT = Path(__file__).resolve().parents[1]


def start_worker(broker_uri: str, queue: str, log_path: Path,
                 queue_type: str | None = None) -> subprocess.Popen:
    """A solo-pool worker consuming ``queue`` on ``broker_uri`` (``queue_type`` "quorum":
    declared as a quorum queue, see ``celery_app``), logging to ``log_path``."""
    env = dict(os.environ, INTEROP_CELERY_BROKER=broker_uri, INTEROP_CELERY_QUEUE=queue)
    if queue_type:
        env["INTEROP_CELERY_QUEUE_TYPE"] = queue_type
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "celery", "-A", "interop_tests.celery_app", "worker",
           "--pool=solo", "-c", "1", "--without-heartbeat", "--without-gossip",
           "--without-mingle", "-l", "info", "-n", f"{queue}@localhost"]
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def stop_worker(proc: subprocess.Popen) -> None:
    """SIGTERM the worker's process group, SIGKILL after 15 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
