"""MessageStore basics: round trip, order, acks, fan-out, redelivered flag, paging, policies."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from queues.store import SYNC_POLICIES, MessageStore, StoreError

from .support import bodies, msg


@pytest.fixture
def store(tmp_path: Path):
    s = MessageStore(tmp_path / "store")
    yield s
    s.close()


def reopen(store: MessageStore, clean: bool = True, **kw) -> MessageStore:
    if clean:
        store.close()
    else:
        store.abandon()
    return MessageStore(store.directory, **kw)


def test_round_trip_keeps_everything_of_the_message(store):
    m = msg(b"\x00\xffbody", routing_key="r.k", exchange="amq.topic")
    sid = store.append("q", m)
    assert m.store_id == sid
    assert store.sync() == sid
    store = reopen(store)
    got = store.recover()["q"]
    assert [r.store_id for r in got] == [sid]
    out = got[0].message
    assert (out.exchange, out.routing_key, out.header_payload, out.body) == (
        "amq.topic", "r.k", m.header_payload, m.body)
    assert out.store_id == sid and out.persistent and out.properties.content_type == "text/plain"
    assert got[0].body_loaded and not got[0].redelivered
    store.close()


def test_ids_grow_and_order_is_kept_per_queue(store):
    ids = [store.append("a" if i % 3 else "b", msg(f"m{i}")) for i in range(30)]
    assert ids == sorted(ids) and len(set(ids)) == 30
    store.sync()
    store = reopen(store)
    rec = store.recover()
    assert bodies(rec, "a") == [f"m{i}".encode() for i in range(30) if i % 3]
    assert bodies(rec, "b") == [f"m{i}".encode() for i in range(30) if not i % 3]
    store.close()


def test_acked_messages_do_not_come_back(store):
    ids = [store.append("q", msg(str(i))) for i in range(10)]
    assert store.ack("q", ids[3]) and store.ack_many("q", [ids[5], ids[7], ids[7]]) == 2
    assert not store.ack("q", ids[3]), "second ack is a no-op"
    assert not store.ack("other", ids[4]) and not store.ack("q", 999)
    store.sync()
    store = reopen(store, clean=False)
    assert bodies(store.recover(), "q") == [str(i).encode() for i in (0, 1, 2, 4, 6, 8, 9)]
    store.close()


def test_fanout_message_stays_until_every_queue_lets_go(store):
    sid = store.append(["a", "b", "c"], msg("fan"))
    store.ack("a", sid)
    store.sync()
    store = reopen(store)
    rec = store.recover()
    assert set(rec) == {"b", "c"} and rec["b"][0].message is rec["c"][0].message
    store.ack("b", sid)
    store.ack("c", sid)
    store.sync()
    store = reopen(store)
    assert store.recover() == {}
    store.close()


def test_delete_queue_drops_its_messages_only(store):
    store.append("a", msg("a1"))
    shared = store.append(["a", "b"], msg("ab"))
    store.append("b", msg("b1"))
    assert store.delete_queue("a") == 2 and store.delete_queue("a") == 0
    assert not store.holds("a", shared) and store.holds("b", shared)
    store.append("a", msg("a2"))  # a re-declared queue of the same name
    store.sync()
    store = reopen(store, clean=False)
    rec = store.recover()
    assert bodies(rec, "a") == [b"a2"] and bodies(rec, "b") == [b"ab", b"b1"]
    store.close()


def test_redelivered_after_clean_close_only_for_delivered(store):
    ids = [store.append("q", msg(str(i))) for i in range(3)]
    assert store.mark_delivered("q", ids[1]) and not store.mark_delivered("x", ids[1])
    store = reopen(store)
    assert store.recovered_clean
    assert [r.redelivered for r in store.recover()["q"]] == [False, True, False]
    store = reopen(store, clean=False)  # a crash: every message may have been delivered
    assert not store.recovered_clean
    assert [r.redelivered for r in store.recover()["q"]] == [True, True, True]
    store = reopen(store, clean=False)  # crash right after opening: still dirty, never "clean"
    assert not store.recovered_clean
    store.close()


def test_restart_continues_with_higher_ids(store):
    first = [store.append("q", msg("x")) for _ in range(5)]
    store.sync()
    for clean in (True, False):
        store = reopen(store, clean=clean)
        later = store.append("q", msg("y"))
        assert later > max(first)
        first.append(later)
        store.sync()
    assert [r.store_id for r in store.recover()["q"]] == first


def test_read_body_from_buffer_and_disk(store):
    sid = store.append("q", msg("buffered"))
    assert store.read_body(sid) == b"buffered"
    store.sync()
    assert store.read_body(sid) == b"buffered"
    assert store.read_message(sid).routing_key == "rk"
    store.ack("q", sid)
    with pytest.raises(KeyError):
        store.read_body(sid)


def test_body_budget_pages_out_the_tail_of_each_queue(store):
    for i in range(10):
        store.append("q", msg(bytes([i]) * 100))
    store.append("small", msg("s"))
    store = reopen(store)
    rec = store.recover(body_budget=350)
    assert [r.body_loaded for r in rec["q"]] == [True] * 3 + [False] * 7
    assert rec["small"][0].body_loaded
    paged = rec["q"][5]
    assert paged.message.body == b"" and paged.message.header_payload
    assert store.read_body(paged.store_id) == bytes([5]) * 100
    store.close()


@pytest.mark.parametrize("policy", SYNC_POLICIES)
def test_every_sync_policy_round_trips(tmp_path, policy):
    store = MessageStore(tmp_path, sync=policy, segment_bytes=4096)
    ids = [store.append("q", msg(b"p" * 300)) for _ in range(40)]
    if policy == "always":
        assert store.durable_id == ids[-1], "always: durable as soon as append returns"
    store.ack("q", ids[0])
    assert store.sync() == ids[-1]
    store.abandon()
    store = MessageStore(tmp_path, sync=policy, segment_bytes=4096)
    assert [r.store_id for r in store.recover()["q"]] == ids[1:]
    store.close()


def test_split_sync_runs_fsync_in_another_thread(store):
    sid = store.append("q", msg("x"))
    pending = store.flush()
    assert pending.durable_id == sid
    later = store.append("q", msg("y"))  # the loop keeps going meanwhile
    with pytest.raises(StoreError):
        store.synced(pending)
    t = threading.Thread(target=pending.run)
    t.start()
    t.join()
    assert store.synced(pending) == sid and store.durable_id == sid
    assert store.sync() == later


def test_bad_arguments_and_closed_store(tmp_path):
    with pytest.raises(ValueError):
        MessageStore(tmp_path, sync="sometimes")
    store = MessageStore(tmp_path)
    with pytest.raises(ValueError):
        store.append([], msg("x"))
    with pytest.raises(ValueError):
        store.append("q" * 256, msg("x"))
    store.close()
    store.close()
    with pytest.raises(StoreError):
        store.append("q", msg("x"))


def test_stats(store):
    store.append("q", msg(b"x" * 100))
    st = store.stats()
    assert st.live_messages == 1 and st.queues == 1 and st.buffered_bytes > 100
    store.sync()
    st = store.stats()
    assert st.buffered_bytes == 0 and st.durable_id == st.next_id - 1 and st.files == 1
    assert store.queue_length("q") == 1 and store.queue_length("nope") == 0
