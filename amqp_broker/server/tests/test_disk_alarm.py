"""The disk watch: ``check_disk`` raises the broker's disk alarm while the data directory's file
system has less free space than the limit, clears it otherwise, and leaves it alone when the file
system cannot be read (RabbitMQ "Disk Alarms")."""

from __future__ import annotations

from amqp_broker.core.broker import Broker
from amqp_broker.server.listener import check_disk, disk_free_bytes


def test_check_disk_compares_free_space_with_the_limit(tmp_path) -> None:
    broker = Broker()
    free = disk_free_bytes(tmp_path)
    assert free is not None and free > 0
    check_disk(broker, tmp_path, 1 << 62)  # more than any disk has free
    assert broker.alarms == {"disk"}
    check_disk(broker, tmp_path, 1)
    assert not broker.alarms


def test_an_unreadable_data_dir_leaves_the_alarm_as_it_is(tmp_path) -> None:
    broker = Broker()
    assert disk_free_bytes(tmp_path / "missing" / "dir") is None
    check_disk(broker, tmp_path / "missing" / "dir", 1 << 62)
    assert not broker.alarms
    broker.set_alarm("disk", True)
    check_disk(broker, tmp_path / "missing" / "dir", 1)
    assert broker.alarms == {"disk"}
