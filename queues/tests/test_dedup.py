"""Publish dedup window (x-message-deduplication, x-cache-size, x-cache-ttl) on the queue model."""

from __future__ import annotations

import pytest
from pamqp import commands

from queues.arguments import parse_arguments
from queues.dedup import DedupWindow, dedup_key
from queues.errors import InvalidArgument
from queues.message import Message
from queues.queue import PublishResult, Queue


def _msg(message_id=None, headers=None, body=b"x"):
    return Message.build("", "q", body, commands.Basic.Properties(message_id=message_id,
                                                                   headers=headers))


def _queue(args, now):
    return Queue("q", parse_arguments(args), arguments=args, clock=lambda: now[0])


def test_duplicate_message_id_is_dropped_and_reported_duplicate():
    now = [0]
    q = _queue({"x-message-deduplication": True}, now)
    assert q.publish(_msg("a")) is PublishResult.ROUTED
    assert q.publish(_msg("a", body=b"again")) is PublishResult.DUPLICATE
    assert q.publish(_msg("b")) is PublishResult.ROUTED
    assert [e.message.message_id for e in q.ready_entries()] == ["a", "b"]
    assert q.ready_entries()[0].message.body == b"x"


def test_dedup_header_wins_over_message_id_and_messages_without_key_pass():
    now = [0]
    q = _queue({"x-message-deduplication": True}, now)
    q.publish(_msg("id1", {"x-deduplication-header": "k"}))
    q.publish(_msg("id2", {"x-deduplication-header": "k"}))
    q.publish(_msg())
    q.publish(_msg())
    assert q.message_count == 3


def test_duplicate_after_consumption_is_still_dropped_inside_the_window():
    now = [0]
    q = _queue({"x-message-deduplication": True, "x-cache-ttl": 1000}, now)
    q.publish(_msg("a"))
    assert q.get(no_ack=True) is not None
    now[0] = 999
    q.publish(_msg("a"))
    assert q.message_count == 0
    now[0] = 2000
    q.publish(_msg("a"))
    assert q.message_count == 1


def test_cache_size_evicts_oldest_key():
    now = [0]
    q = _queue({"x-message-deduplication": True, "x-cache-size": 2}, now)
    for key in ("a", "b", "c"):
        q.publish(_msg(key))
    q.publish(_msg("a"))  # "a" was evicted by "c": accepted again
    q.publish(_msg("c"))  # still remembered: dropped
    assert [e.message.message_id for e in q.ready_entries()] == ["a", "b", "c", "a"]


def test_rejected_publish_does_not_enter_the_window():
    now = [0]
    q = _queue({"x-message-deduplication": True, "x-max-length": 0,
                "x-overflow": "reject-publish"}, now)
    assert q.publish(_msg("a")) is PublishResult.REJECTED
    assert len(q.dedup) == 0


def test_snapshot_restore_keeps_window_and_remaining_ttl():
    now = [100]
    w = DedupWindow(10, 500, lambda: now[0])
    w.check_and_add("a")
    now[0] = 300
    w.check_and_add("b")
    snap = w.snapshot()
    assert snap == [("a", 300), ("b", 500)]
    later = [10_000]
    w2 = DedupWindow(10, 500, lambda: later[0])
    w2.restore(snap)
    assert w2.check_and_add("a") and w2.check_and_add("b")
    later[0] = 10_301
    assert not w2.check_and_add("a")


@pytest.mark.parametrize("args", [{"x-message-deduplication": "yes"},
                                  {"x-message-deduplication": True, "x-cache-size": 0},
                                  {"x-message-deduplication": True, "x-cache-ttl": "soon"}])
def test_bad_dedup_arguments_are_refused(args):
    with pytest.raises(InvalidArgument):
        parse_arguments(args)


def test_cache_size_may_be_decimal_text_as_the_plugin_examples_use():
    assert parse_arguments({"x-message-deduplication": True, "x-cache-size": "5"}).dedup_cache_size == 5


def test_dedup_key_of_a_non_string_header_is_its_text():
    assert dedup_key(_msg("id", {"x-deduplication-header": 7})) == "7"
