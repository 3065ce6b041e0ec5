"""tune_malloc: large bodies allocated and freed over and over stop costing page faults."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from amqp_broker.server.malloc_tuning import tune_malloc

# A burst of 64 KiB bodies (4 MiB) taken in and let go, 300 times over, as a queue with large
# messages does; the minor page faults the process took meanwhile are printed.
CHURN = """
import resource, sys
if sys.argv[1] == "tuned":
    from amqp_broker.server.malloc_tuning import tune_malloc
    assert tune_malloc()
chunk = b"x" * 65600
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(300):
    bodies = [chunk[i % 7:65536 + i % 7] for i in range(64)]
    del bodies
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc malloc only")


def _page_faults(mode: str) -> int:
    proc = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True,
                          timeout=120, check=True)
    return int(proc.stdout.strip())


@glibc_only
def test_large_body_churn_stops_faulting_pages_in() -> None:
    # Tuned, the burst's 4 MiB are faulted in once (1,024 pages) and kept for the next rounds.
    # With glibc's defaults the freed top of the heap goes back to the OS and is faulted in again
    # in later rounds: 10,000 to 100,000 faults here, depending on the heap's layout.
    assert _page_faults("tuned") < 2 * 1024
    assert _page_faults("default") > 2 * 1024


@glibc_only
def test_tune_malloc_applies_on_glibc() -> None:
    assert tune_malloc() is True
