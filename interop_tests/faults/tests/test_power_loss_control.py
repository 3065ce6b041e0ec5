"""The power-loss nemesis bites: its negative control (issue 24).

The same harness run as CI's short runs, but with the brokers told not to fsync (``--broker-arg
--sync-policy=none``: confirms once written to the OS, which survives kill -9 but not a power
cut), one broker losing power at a time (``power-loss``) and slower consumers (``--ack-delay
0.05``: a backlog of confirmed messages sits in the queue when the power goes). Not
``power-loss-all``: without fsync the brokers lose their membership votes too, and a majority
without votes stays a frozen minority (cluster/membership.py, "Known limits of Restart").
The checker must report lost messages and the harness must exit 1. With the default
``--sync-policy batch`` the same run loses nothing (test_nemeses.py). Skipped where network
namespaces or FUSE cannot be used.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from interop_tests.faults.lazyfs_mount import unavailable_reason as lazyfs_unavailable
from interop_tests.faults.netns import unavailable_reason

REPO = Path(__file__).resolve().parents[3]
REASON = unavailable_reason() or lazyfs_unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"cannot run: {REASON}")


@pytest.mark.timeout(240)
def test_power_loss_without_fsync_loses_confirmed_messages(tmp_path: Path) -> None:
    out = tmp_path / "outcome.json"
    proc = subprocess.run(
        [sys.executable, "-m", "interop_tests.faults", "--nemesis", "power-loss",
         "--seconds", "12", "--runs", "1", "--brokers", "3", "--queue-type", "classic",
         "--ack-delay", "0.05", "--broker-arg=--sync-policy=none", "--seed", "11",
         "--no-results", "--work-dir", str(tmp_path / "runs"), "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=220)
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    (outcome,) = json.loads(out.read_text())
    assert outcome["error"] is None, report
    assert outcome["faults"] > 0 and outcome["result"]["confirmed"] > 0, report
    assert outcome["result"]["lost"] > 0, report
    assert proc.stdout.strip().splitlines()[-1].split()[2] != "lost=0", report
    assert proc.returncode == 1, report
