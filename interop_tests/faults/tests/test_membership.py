"""A short run of the ``membership`` nemesis (issue 24) against a quorum queue: 3 brokers in
network namespaces, one fault of about 2 s in a 6 s workload -- a broker's data dir wiped while
its replica is a member (``wipe-rejoin``, the operation that found the bootstrap bug of
``cluster/tests/test_quorum_rejoin.py``) or a replica deleted and added again while a companion
fault (a kill, a partition) runs, as the seed picks. Kept short for make test's budget (about
30 s); soak runs (``python -m interop_tests.faults --nemesis membership --runs N``) run every
operation and companion.

What must hold, as for every nemesis (``test_nemeses``): the run completes, the fault happened
(the history's ``membership`` event and its steps), publishes were confirmed, nothing confirmed
was lost and nothing unpublished delivered, the queue is empty on every broker after the drain,
no broker logged a traceback, the replicas agree (read from their files after the drain: same
entries, same committed messages in the same order), and the last line has the documented form.
Skipped where network namespaces cannot be made (not root, no ``ip``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from interop_tests.faults.membership import OPS_ENV
from interop_tests.faults.netns import unavailable_reason

from .test_nemeses import SUMMARY

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=f"network namespaces unavailable: {unavailable_reason()}")


@pytest.mark.timeout(180)
def test_membership_short_run(tmp_path: Path) -> None:
    out = tmp_path / "outcome.json"
    env = {**os.environ, OPS_ENV: "wipe-rejoin,delete-add"}
    proc = subprocess.run(
        [sys.executable, "-m", "interop_tests.faults", "--nemesis", "membership",
         "--seconds", "6", "--fault-s", "2", "--calm-s", "1", "--runs", "1", "--brokers", "3",
         "--queue-type", "quorum", "--seed", "3", "--no-results",
         "--work-dir", str(tmp_path / "runs"), "--json", str(out), "--keep"],
        cwd=REPO, capture_output=True, text=True, timeout=170, env=env)
    lines = proc.stdout.strip().splitlines()
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    assert lines and SUMMARY.match(lines[-1]), report
    (outcome,) = json.loads(out.read_text())
    assert outcome["error"] is None, report
    result = outcome["result"]
    assert outcome["faults"] > 0 and result["confirmed"] > 0, report
    assert result["lost"] == 0 and result["unexpected"] == 0, report
    assert outcome["depths"] and all(d == 0 for d in outcome["depths"].values()), report
    assert outcome["tracebacks"] == 0, report
    assert outcome["replicas"] and not [p for r in outcome["replicas"] for p in r["problems"]], \
        report
    assert proc.returncode == 0, report
    events = [json.loads(line) for line in
              (Path(outcome["run_dir"]) / "views.jsonl").read_text().splitlines()]
    actions = [e["action"] for e in events if e["op"] == "nemesis"]
    assert "membership" in actions and "membership-settled" in actions, report
    assert "wipe" in actions or "member-call" in actions, report
