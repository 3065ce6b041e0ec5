"""A broker whose metadata log's file system is full (``<data>/raft/metadata`` on a 1 MiB tmpfs
that a filler file fills; the ``disk-full`` nemesis's case for the metadata log, issue 24):
a real broker process (a cluster of one, ``--metadata-timeout 1``) and pika.

What a RabbitMQ 4 user expects (Khepri on Ra: a write Ra cannot make leaves the command
uncommitted, and the client's call times out): the broker keeps running and serving; a
definition change it cannot write is refused after the timeout with 541 INTERNAL_ERROR and
Khepri's text (``rabbit_amqqueue_process``: "Could not declare queue ... because the metadata
store operation timed out", a connection error); once space is back, changes commit again
(the log's writes are retried: ``clustering.quorum``'s group commit and ``_persist_async``).
Before the group commit waited out ENOSPC (45980fa), the broker exited on the failed write.
Needs root (mount). Every wait is bounded. Network: 127.0.0.0/8 only.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from cluster.tests.processes import Cluster, wait_for
from queues.store.tests.small_fs import UNAVAILABLE, fill, free, small_fs

pytestmark = [pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE)),
              pytest.mark.timeout(120)]


#: An argument no broker reads (RabbitMQ keeps it): the queue's record is larger than the room
#: tmpfs leaves in the last page of the log's segment file, so its write needs a new page.
PAD = {"pad": "p" * 16384}


def _declare(uri: str, name: str) -> None:
    """Declare durable queue ``name`` (with ``PAD``) on a new connection (raises pika's
    errors)."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        conn.channel().queue_declare(name, durable=True, arguments=PAD)
    finally:
        if conn.is_open:
            conn.close()


def _declared(uri: str, name: str) -> bool:
    """Whether declaring ``name`` succeeds now (False when refused)."""
    try:
        _declare(uri, name)
        return True
    except pika.exceptions.AMQPError:
        return False


def test_a_full_metadata_disk_refuses_changes_then_recovers(tmp_path):
    cluster = Cluster.create(tmp_path, "--metadata-timeout", "1")
    member_dir = tmp_path / "n5"
    with small_fs(member_dir / "raft" / "metadata", 1 << 20) as fs:
        try:
            n5 = cluster.start(5)
            wait_for(n5.serving, 30, f"n5 does not serve:\n{n5.log_tail()}", 0.2)
            _declare(n5.uri, "full.before")
            fill(fs)
            with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as refused:
                _declare(n5.uri, "full.during")
            assert refused.value.reply_code == 541, refused.value
            assert "Could not declare queue 'full.during'" in refused.value.reply_text
            assert "metadata store operation timed out" in refused.value.reply_text
            assert n5.proc is not None and n5.proc.poll() is None, n5.log_tail()
            assert n5.serving(), n5.log_tail()   # clients still get in
            free(fs)
            wait_for(lambda: _declared(n5.uri, "full.after"), 20,
                     f"no change commits once space is back:\n{n5.log_tail()}", 0.2)
            assert n5.proc.poll() is None, n5.log_tail()
        finally:
            cluster.stop_all()


def test_definitions_db_full_then_freed_keeps_a_durable_queues_messages_over_a_restart(tmp_path):
    """The data dir full while the metadata log still writes (``raft`` on a file system of its
    own): a durable queue declared then is committed in the log and followed, but its
    definitions.db commit fails. Once space is back the broker writes its definitions again, so
    that after a kill -9 and restart recovery finds the queue and the messages confirmed into it
    since (before: definitions.db lacked it, recovery released its messages, and the log made the
    queue again, empty). Found by the ``disk-full`` nemesis with the definitions workload."""
    cluster = Cluster.create(tmp_path, "--disk-free-limit", "1")
    member_dir = tmp_path / "n6"
    with small_fs(member_dir, 8 << 20) as data, small_fs(member_dir / "raft", 8 << 20):
        try:
            n6 = cluster.start(6)
            wait_for(n6.serving, 30, f"n6 does not serve:\n{n6.log_tail()}", 0.2)
            _declare(n6.uri, "db.before")
            fill(data)
            _declare(n6.uri, "db.during")   # committed in the log; definitions.db refuses it
            free(data)
            wait_for(lambda: "definitions.db written again" in n6.log_tail(), 20,
                     f"definitions not written again:\n{n6.log_tail()}", 0.2)
            conn = n6.connect()
            ch = conn.channel()
            ch.confirm_delivery()
            for i in range(5):
                ch.basic_publish("", "db.during", b"m%d" % i,
                                 pika.BasicProperties(delivery_mode=2))
            conn.close()
            cluster.kill(n6)
            cluster.start(6)
            wait_for(n6.serving, 30, f"n6 does not serve again:\n{n6.log_tail()}", 0.2)
            conn = n6.connect()
            ch = conn.channel()
            got = [ch.basic_get("db.during", auto_ack=True)[2] for _ in range(6)]
            conn.close()
            assert got == [b"m0", b"m1", b"m2", b"m3", b"m4", None], n6.log_tail()
            assert "Traceback" not in n6.log_tail(200)
        finally:
            cluster.stop_all()
