"""The by-hand cluster commands of ``docs/clustering.md`` (the ```sh block after the line
``<!-- test: by-hand cluster -->``) run as written: three brokers on one host with only their AMQP
ports apart form one cluster, and each one's management API answers on its derived port (issue 22
item 2).

The block is run by bash from a fresh directory (its relative paths, ``cluster.secret``,
``data/nK``, ``nK.log``, land there) with only what must change to run beside other tests:
ports 5701-5703 -> free ones, ``.venv/bin/`` -> this venv's bin directory; in a user's environment
(no AMQP_BROKER_*_PORT)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from .ports import HOST, VENV_BIN, free_base, http_json, http_text, user_env, wait_agreed

DOC = Path(__file__).resolve().parents[3] / "docs" / "clustering.md"
MARKER = "<!-- test: by-hand cluster -->"


def by_hand_block() -> str:
    """The ```sh block right after ``MARKER`` in ``DOC``."""
    text = DOC.read_text()
    assert MARKER in text, f"{DOC} has no {MARKER!r}"
    after = text.split(MARKER, 1)[1]
    match = re.match(r"\s*```sh\n(.*?)\n```", after, re.S)
    assert match, f"no ```sh block after {MARKER!r} in {DOC}"
    return match.group(1)


def _stop_group(pgid: int) -> None:
    """SIGTERM the process group (the brokers the block started in the background), then wait
    for it to empty (at most 30 s; SIGKILL after that)."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    for _ in range(300):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(pgid, signal.SIGKILL)


def test_by_hand_commands_run_as_written(tmp_path: Path) -> None:
    base = free_base(3)
    ports = [base, base + 1, base + 2]
    script = by_hand_block().replace(".venv/bin/", f"{VENV_BIN}/")
    for documented, port in zip((5701, 5702, 5703), ports, strict=True):
        script = re.sub(rf"\b{documented}\b", str(port), script)
    proc = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=user_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=90)
        logs = "\n".join(f"{p.name}: {p.read_text()}" for p in sorted(tmp_path.glob("n*.log")))
        assert proc.returncode == 0, f"{out}\n{logs}"
        assert '"reachable": true' in out
        wait_agreed(ports, ["n1", "n2", "n3"])
        for i, port in enumerate(ports, 1):
            assert http_json(f"http://{HOST}:{port + 10000}/api/overview")["node"] == f"n{i}"
            assert "rabbitmq_" in http_text(f"http://{HOST}:{port + 10020}/metrics")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        _stop_group(proc.pid)
