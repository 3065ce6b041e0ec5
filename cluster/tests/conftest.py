"""Fixtures of the cluster process tests: ``cluster``, the brokers of one test on 127.0.0.2-6
(``cluster.tests.processes.Cluster``), all stopped at its end."""

from __future__ import annotations

import pytest

from cluster.tests.processes import Cluster


@pytest.fixture
def cluster(tmp_path):
    """A ``Cluster`` in the test's tmp dir; every broker it started is killed afterwards."""
    c = Cluster.create(tmp_path)
    try:
        yield c
    finally:
        c.stop_all()
