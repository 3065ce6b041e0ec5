"""Repository-wide pytest setup.

- Broker processes that tests start (interop, cluster, clients, spark, faults) do not take the fixed
  management and Prometheus ports (15672/15692), since many brokers run at once; a test that wants
  them passes --management-port/--prometheus-port (flags beat the environment).
- ``amqp-broker ctl`` remembers cluster members in ``$XDG_CACHE_HOME/amqp-broker/ctl-members.json``;
  the tests get a cache directory of their own (made once per pytest process, removed at exit), so a
  test run never writes into the user's ``~/.cache``.
- Under pytest-xdist (``make test`` runs ``pytest -n 2 --dist loadgroup``), ``xdist_group`` keeps
  each test file on one worker (its module fixtures start brokers and clusters once) and the Spark
  tests together (one Spark session, one JVM); the fault harness's tests (each its own cluster in
  network namespaces, waiting most of its time) go to whichever worker is free, one by one, and
  before the other tests (handed out last, they left one worker idle at the end: ``first_scopes``).
"""

import atexit
import os
import shutil
import tempfile

import pytest

os.environ.setdefault("AMQP_BROKER_MANAGEMENT_PORT", "0")
os.environ.setdefault("AMQP_BROKER_PROMETHEUS_PORT", "0")

_cache_dir = tempfile.mkdtemp(prefix="amqp-broker-test-cache-")
atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)
os.environ["XDG_CACHE_HOME"] = _cache_dir


#: Test paths whose tests pytest-xdist may hand to different workers one by one.
XDIST_ONE_BY_ONE = ("interop_tests/faults/tests/",)
#: Test paths kept on one worker together, by group name.
XDIST_TOGETHER = {"spark/": "spark"}


def xdist_group(nodeid: str) -> str | None:
    """The xdist group of the test ``nodeid`` (``path::name``, relative to the repository): None
    (any worker) under ``XDIST_ONE_BY_ONE``, the ``XDIST_TOGETHER`` name of its path, else its
    file's path."""
    path = nodeid.split("::", 1)[0]
    if path.startswith(XDIST_ONE_BY_ONE):
        return None
    return next((g for prefix, g in XDIST_TOGETHER.items() if path.startswith(prefix)), path)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """With ``--dist loadgroup``: xdist's scheduler by scope, its scopes ``xdist_group(nodeid)``
    (or the test alone). pytest 9's node ids cannot carry the ``@group`` suffix that xdist's own
    loadgroup puts on marked tests, so its marks group nothing; groups come from paths here.
    Scopes with more tests are handed out first (xdist's ``--loadscope-reorder``), except that
    after the first two the ``XDIST_ONE_BY_ONE`` tests come before every other (``first_scopes``):
    they are whole harness runs of 20-40 s, one test a scope, and so came last; and xdist hands a
    worker a new scope whenever it has two tests or fewer pending, so at the end one worker ran
    the last two or three runs while the other had nothing left to do."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class PathGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid) or nodeid

        def schedule(self) -> None:
            initial = self.collection is None
            super().schedule()
            if initial and self.workqueue:
                reordered = first_scopes(list(self.workqueue.items()))
                self.workqueue.clear()
                self.workqueue.update(reordered)

    return PathGroupScheduling(config, log)  # type: ignore[arg-type]


def first_scopes(units: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """xdist's work units ``[(scope, {nodeid: done}), ...]`` (``LoadScopeScheduling.workqueue``,
    pytest-xdist 3.8) in the order to hand them out: the ``XDIST_ONE_BY_ONE`` scopes first, each
    part in its order before. Never raises."""
    return sorted(units, key=lambda unit: not unit[0].startswith(XDIST_ONE_BY_ONE))
