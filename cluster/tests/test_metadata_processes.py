"""The cluster metadata log in real brokers (issue 23): restarts, a full-cluster power loss, a
minority.

One 3-broker cluster (n2 founds, n3 and n4 join) serves the module, started with
``--metadata-timeout 3`` (RabbitMQ 4's 30 s ``khepri_default_timeout``, shortened). What a
RabbitMQ 4 user expects (Khepri):

- a member that was down while definitions were deleted forgets them when it is back (before the
  log, it restored them from its own ``definitions.db`` and kept them for good), and gets what
  was declared meanwhile; every committed definition survives a kill -9 of every member at
  once, whichever member comes back first;
- a cluster whose members have definitions but no metadata log (upgrading from the broadcast
  design) keeps them after one cluster restart, and the log decides from then on;
- a member cut off from the majority refuses a declaration after the timeout with 541
  INTERNAL_ERROR and Khepri's text (``rabbit_amqqueue_process``); once the others are back every
  member agrees on the name (as with Khepri, a timeout is no refusal: the command may commit
  once the leader hears it).

The upgrade test (a third full-cluster restart) runs with ``AMQP_FAULTS_ALL=1`` only, for
``make test``'s budget (as the fault harness's long cases). Every wait is bounded. Network:
127.0.0.0/8 only.
"""

from __future__ import annotations

import os
import shutil

import pika
import pika.exceptions
import pytest

from cluster.tests.processes import Cluster, Member, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def trio(tmp_path_factory):
    """n2, n3, n4 in one view, metadata timeout 3 s."""
    cluster = Cluster.create(tmp_path_factory.mktemp("metadata"), "--metadata-timeout", "3")
    try:
        yield cluster, list(cluster.start_three(timeout=30))
    finally:
        cluster.stop_all()


def _exists(member: Member, kind: str, name: str) -> bool:
    """Whether a passive declare of exchange or queue ``name`` succeeds on ``member``."""
    conn = member.connect()
    try:
        ch = conn.channel()
        try:
            if kind == "queue":
                ch.queue_declare(name, passive=True)
            else:
                ch.exchange_declare(name, passive=True)
            return True
        except pika.exceptions.ChannelClosedByBroker as exc:
            assert exc.reply_code == 404, exc
            return False
    finally:
        if conn.is_open:
            conn.close()


def _serving(cluster: Cluster, member: Member) -> None:
    wait_for(member.serving, 40, f"{member.name} does not serve:\n{member.log_tail()}", 0.2)


def test_deleted_while_away_is_forgotten_and_survives_a_full_power_loss(trio):
    cluster, (n2, n3, n4) = trio
    conn = n2.connect()
    ch = conn.channel()
    ch.exchange_declare("m23.x", "direct", durable=True)
    ch.queue_declare("m23.gone", durable=True)
    ch.queue_bind("m23.gone", "m23.x", "k")
    ch.queue_declare("m23.kept", durable=True)
    conn.close()
    assert _exists(n4, "queue", "m23.gone") and _exists(n4, "exchange", "m23.x")

    cluster.kill(n4)   # away: it keeps m23.gone and m23.x in its definitions.db
    conn = n3.connect()
    ch = conn.channel()
    ch.queue_delete("m23.gone")
    ch.exchange_delete("m23.x")
    ch.queue_declare("m23.new", durable=True)
    conn.close()

    cluster.start(4)   # back (its vote: no seed): catches up from the log
    _serving(cluster, n4)
    assert not _exists(n4, "queue", "m23.gone"), "n4 kept a queue deleted while it was away"
    assert not _exists(n4, "exchange", "m23.x"), "n4 kept an exchange deleted while it was away"
    assert _exists(n4, "queue", "m23.new") and _exists(n4, "queue", "m23.kept")

    cluster.kill_together([n2, n3, n4])   # power loss of every member
    for m in (n4, n3, n2):
        cluster.start(int(m.host.rsplit(".", 1)[1]), wait=False)
    for m in (n2, n3, n4):
        _serving(cluster, m)
    for m in (n2, n3, n4):
        assert _exists(m, "queue", "m23.kept") and _exists(m, "queue", "m23.new"), m.name
        assert not _exists(m, "queue", "m23.gone") and not _exists(m, "exchange", "m23.x"), \
            m.name


@pytest.mark.skipif(os.environ.get("AMQP_FAULTS_ALL") != "1",
                    reason="a third full-cluster restart (~10-20 s): AMQP_FAULTS_ALL=1 runs it")
def test_upgrade_a_cluster_without_a_metadata_log_keeps_its_definitions(trio):
    """Members with a definitions.db and a vote but no metadata log (the broadcast design's
    data): after one cluster restart the view's leader founds the log with its definitions."""
    cluster, members = trio
    for m in members:
        _serving(cluster, m)
    conn = members[1].connect()
    ch = conn.channel()
    ch.exchange_declare("m23.up.x", "topic", durable=True)
    ch.queue_declare("m23.up.q", durable=True, arguments={"x-max-length": 7})
    ch.queue_bind("m23.up.q", "m23.up.x", "a.#")
    conn.close()
    cluster.kill_together(members)
    for m in members:
        shutil.rmtree(m.data_dir / "raft")
    for m in members:
        cluster.start(int(m.host.rsplit(".", 1)[1]), wait=False)
    for m in members:
        _serving(cluster, m)
        assert _exists(m, "queue", "m23.up.q") and _exists(m, "exchange", "m23.up.x"), m.name
    conn = members[2].connect()
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:   # the log knows it
        ch.queue_declare("m23.up.q", durable=True, arguments={"x-max-length": 8})
    assert err.value.reply_code == 406
    conn.close()


def test_a_minority_member_refuses_a_declare_with_khepri_timeout(trio):
    cluster, members = trio
    for m in members:
        _serving(cluster, m)
    lone, *others = members
    conn = lone.connect()
    ch = conn.channel()
    for m in others:
        cluster.freeze(m)
    try:
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
            ch.queue_declare("m23.minority", durable=True)
        assert err.value.reply_code == 541
        assert err.value.reply_text == (
            "INTERNAL_ERROR - Could not declare queue 'm23.minority' in vhost '/' on node "
            f"'{lone.name}' because the metadata store operation timed out")
    finally:
        for m in others:
            cluster.thaw(m)
    for m in others:
        _serving(cluster, m)
    wait_for(lambda: len({_exists(m, "queue", "m23.minority") for m in members}) == 1, 20,
             "the members disagree on m23.minority", 0.2)
