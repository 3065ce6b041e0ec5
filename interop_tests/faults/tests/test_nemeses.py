"""A short run of every nemesis: 3 brokers in network namespaces, classic shared queue, ~12 s
(kill, partition-halves and mixed in `make test`, the others with AMQP_FAULTS_ALL=1);
of issue 24's ``corrupt`` and kill-target nemeses against a quorum queue; and, with
AMQP_FAULTS_ALL=1, of kill, pause, partition-halves and membership against a replicated stream
(issue 25; its readers' offsets checked, ``stream_check``).

Each test runs the harness as ``python -m interop_tests.faults`` (its own process: the harness
enters the hub namespace, which must not happen to pytest's process) and reads its ``--json``
outcome. What must hold today for every nemesis: the run completes (no harness error), faults
were injected, publishes were confirmed, nothing unpublished was delivered (unexpected == 0),
the queue is empty on every broker after the drain, no broker logged a traceback, the quorum
queue's replicas agree (read from their files after the drain), and the final line has the
documented form.

``lost == 0`` is asserted for every nemesis: with the acknowledged relay (issue 10) a message
dealt to another broker stays its sender's until that broker's consumer settles it, so a killed
receiver, a partition or a flapping link requeues it at the sender instead of losing it. (Before
it, kill, partition-* , link-flap and mixed lost confirmed messages: see RESULTS.md.)
Skipped only where network namespaces cannot be made (not root, no ``ip``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from interop_tests.faults.lazyfs_mount import unavailable_reason as lazyfs_unavailable
from interop_tests.faults.loopdisk import unavailable_reason as loopdisk_unavailable
from interop_tests.faults.lossy import unavailable_reason as lossy_unavailable
from interop_tests.faults.netns import unavailable_reason

REPO = Path(__file__).resolve().parents[3]
SECONDS = 12
NEMESES = ["kill", "pause", "partition-one", "partition-halves", "partition-ring", "link-flap",
           "mixed"]
#: Classic-queue nemeses kept out of `make test` for its time budget (25 min; about 24 s each):
#: each has 100 clean soak runs (RESULTS.md "Faults"), and ``mixed`` (in `make test`) draws each
#: of its faults at random from every nemesis. AMQP_FAULTS_ALL=1 runs them.
CLASSIC_SOAK_ONLY = {"pause", "partition-one", "partition-ring", "link-flap"}
SUMMARY = re.compile(r"^runs=(\d+) confirmed=(\d+) lost=(\d+) unexpected=(\d+) "
                     r"duplicates=(\d+) unavailable_s=(\d+\.\d) tracebacks=(\d+) "
                     r"diverged=(\d+) divergent=(\d+) lost_changes=(\d+)$")
#: The nemeses of issue 24 run against a quorum queue (``corrupt`` damages its replicas' files;
#: ``kill-queue-leader`` needs its Raft leader), each kept to about 40 s.
QUORUM_NEMESES = ["corrupt", "kill-queue-leader", "kill-majority", "kill-all"]
#: Power loss (issue 24; brokers on lazyfs, every write not fsynced dropped) of a majority and of
#: every broker at once, against a quorum queue (where it found its bugs), about 40 s each; the
#: one-broker variant and the negative control are in test_power_loss_control.py and soak runs.
POWER_NEMESES = ["power-loss-majority", "power-loss-all"]
#: Kept out of `make test` for its time budget (25 min): the bugs these found have regression
#: tests of their own at a lower level (membership restart simulation for power-loss-majority),
#: and kill-majority/kill-all are kill-queue-leader's fault on more brokers. AMQP_FAULTS_ALL=1
#: runs them too; soak runs (``python -m interop_tests.faults --runs N``) run every nemesis.
SOAK_ONLY = {"kill-majority", "kill-all", "power-loss-majority", "disk-full"}
#: Issue 24's disk-full (brokers on small loop-mounted ext4 file systems, one filled while
#: publishers run) and lossy-link (nftables loss, tc tbf limits between brokers) against a quorum
#: queue, 8 s of workload (one fault of 3-5 s; about 25 s each on a quiet machine). disk-full is soak only (above): the
#: crashes it found have tests of their own at lower levels (queues/store/tests/test_full_disk.py,
#: cluster/tests/test_raft_disklog_full_disk.py, interop_tests/test_full_disk.py).
LINK_DISK_NEMESES = {"lossy-link": lossy_unavailable, "disk-full": loopdisk_unavailable}
#: Replicated streams (issue 25, ``--queue-type stream``: readers from ``x-stream-offset`` first,
#: ``stream_check``, segment files compared): kill, pause, partition-halves and membership
#: (add_replica / delete_replica under kills and partitions), 40-50 s each, with
#: AMQP_FAULTS_ALL=1 and in soak runs only (`make test`'s budget); in `make test` the stream
#: checks run on their own (test_stream_check.py) and the bugs these runs found have tests at a
#: lower level (cluster/tests/test_stream_resume.py, test_stream_rejoin.py).
STREAM_NEMESES = ["kill", "pause", "partition-halves", "membership"]
SECONDS_OF = {"lossy-link": 8, "disk-full": 8}
NO_LAZYFS = pytest.mark.skipif(lazyfs_unavailable() is not None,
                               reason=f"lazyfs unavailable: {lazyfs_unavailable()}")


SOAK_MARK = pytest.mark.skipif(os.environ.get("AMQP_FAULTS_ALL") != "1",
                               reason="soak only: AMQP_FAULTS_ALL=1 runs it")


def ci_param(nemesis: str, queue_type: str, *marks: pytest.MarkDecorator) -> object:
    """A (nemesis, queue type) case, skipped unless AMQP_FAULTS_ALL=1 when in ``SOAK_ONLY``."""
    if nemesis in SOAK_ONLY:
        marks = (*marks, pytest.mark.skipif(os.environ.get("AMQP_FAULTS_ALL") != "1",
                                            reason="soak only: AMQP_FAULTS_ALL=1 runs it"))
    return pytest.param(nemesis, queue_type, marks=marks)


def did_what_it_says(nemesis: str, events: list[dict]) -> bool:
    """Whether the nemesis events of a kept run show the fault named: a file damaged, the
    queue's leader killed, two of three brokers killed together, all three."""
    kills = [e for e in events if e["action"] == "kill"]
    if nemesis == "corrupt":
        return any(e["action"] == "corrupt" and e["damage"] != "none" for e in events)
    if nemesis == "kill-queue-leader":
        return any(e["kind"] == "queue-leader" for e in kills)
    if nemesis == "lossy-link":     # loss or a limit was installed on brokers' links
        return any(e["action"] == "lossy-link" and (e["loss"] or e["rate_kbit"])
                   for e in events)
    if nemesis == "disk-full":      # the alarm went up, blocked a publisher, then came down
        return (any(e["action"] == "disk-alarm" and e["raised"] and e["client_blocked"]
                    for e in events)
                and any(e["action"] == "disk-alarm-cleared" and e["cleared"] for e in events))
    want = {"kill-majority": 2, "kill-all": 3}.get(nemesis)
    return want is None or any(len(e.get("targets", [])) == want for e in kills)

pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=f"network namespaces unavailable: {unavailable_reason()}")


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("nemesis", "queue_type"), [*(pytest.param(n, "classic", marks=(
                                                         SOAK_MARK,) if n in CLASSIC_SOAK_ONLY
                                                         else ()) for n in NEMESES),
                                                     *(ci_param(n, "quorum") for n in QUORUM_NEMESES),
                                                     *(ci_param(n, "quorum", NO_LAZYFS)
                                                       for n in POWER_NEMESES),
                                                     *(ci_param(n, "quorum", pytest.mark.skipif(
                                                         why() is not None, reason=str(why())))
                                                       for n, why in LINK_DISK_NEMESES.items()),
                                                     *(pytest.param(n, "stream", marks=SOAK_MARK)
                                                       for n in STREAM_NEMESES)])
def test_short_run(nemesis: str, queue_type: str, tmp_path: Path) -> None:
    out = tmp_path / "outcome.json"
    proc = subprocess.run(
        [sys.executable, "-m", "interop_tests.faults", "--nemesis", nemesis,
         "--seconds", str(SECONDS_OF.get(nemesis, SECONDS)), "--runs", "1", "--brokers", "3", "--queue-type", queue_type,
         "--seed", "11", "--no-results", "--work-dir", str(tmp_path / "runs"),
         "--json", str(out), "--keep"],
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
    assert result["lost"] == 0, report
    assert outcome["tracebacks"] == 0, report
    assert not [p for r in outcome["replicas"] for p in r["problems"]], report
    assert outcome["stream"] is None or outcome["stream"]["valid"], report
    assert proc.returncode == 0, report
    events = [json.loads(line) for line in
              (Path(outcome["run_dir"]) / "views.jsonl").read_text().splitlines()]
    assert did_what_it_says(nemesis, [e for e in events if e["op"] == "nemesis"]), report
