"""A short run of every nemesis: 3 brokers in network namespaces, classic shared queue, ~15 s.

Each test runs the harness as ``python -m interop_tests.faults`` (its own process: the harness
enters the hub namespace, which must not happen to pytest's process) and reads its ``--json``
outcome. What must hold today for every nemesis: the run completes (no harness error), faults
were injected, publishes were confirmed, nothing unpublished was delivered (unexpected == 0),
the queue is empty on every broker after the drain, and the final line has the documented form.

``lost == 0`` is asserted only for nemeses outside ``RELAY_LOSS_TODAY``. Today's relay (issue
10) hands a message to the peer link and forgets it: the sender keeps no copy, the receiver keeps
it in memory only. So a confirmed message is lost when the broker it was relayed to is killed
(``kill``, ``mixed``), and when a peer link breaks with relayed messages still in flight (a
partition or a flapping link cuts the link before the view change; seen in partition-halves:
a message published on n3 0.9 s after n2 was cut off, relayed to n2, never seen again). A
SIGSTOPped broker's kernel still takes what is relayed to it and it reads that after SIGCONT, so
``pause`` is expected to lose nothing. When the acknowledged relay of issue 10 lands, empty
``RELAY_LOSS_TODAY``: every nemesis must then lose nothing.
Skipped only where network namespaces cannot be made (not root, no ``ip``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from interop_tests.faults.netns import unavailable_reason

REPO = Path(__file__).resolve().parents[3]
SECONDS = 15
NEMESES = ["kill", "pause", "partition-one", "partition-halves", "partition-ring", "link-flap",
           "mixed"]
RELAY_LOSS_TODAY = {"kill", "partition-one", "partition-halves", "partition-ring", "link-flap",
                    "mixed"}
SUMMARY = re.compile(r"^runs=(\d+) confirmed=(\d+) lost=(\d+) unexpected=(\d+) "
                     r"duplicates=(\d+) unavailable_s=(\d+\.\d)$")

pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=f"network namespaces unavailable: {unavailable_reason()}")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("nemesis", NEMESES)
def test_short_run(nemesis: str, tmp_path: Path) -> None:
    out = tmp_path / "outcome.json"
    proc = subprocess.run(
        [sys.executable, "-m", "interop_tests.faults", "--nemesis", nemesis,
         "--seconds", str(SECONDS), "--runs", "1", "--brokers", "3", "--queue-type", "classic",
         "--seed", "11", "--no-results", "--work-dir", str(tmp_path / "runs"),
         "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=220)
    lines = proc.stdout.strip().splitlines()
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    assert lines and SUMMARY.match(lines[-1]), report
    (outcome,) = json.loads(out.read_text())
    assert outcome["error"] is None, report
    result = outcome["result"]
    assert outcome["faults"] > 0, report
    assert result["confirmed"] > 0, report
    assert result["unexpected"] == 0, report
    assert outcome["depths"] and all(d == 0 for d in outcome["depths"].values()), report
    if nemesis not in RELAY_LOSS_TODAY:
        assert result["lost"] == 0, report
        assert proc.returncode == 0, report
    else:
        print(f"{nemesis}: lost={result['lost']} (the relay loss of issue 10 when > 0), "
              f"kept={outcome['run_dir'] if result['lost'] else None}")
