"""Segment roll-over, deletion of files nobody needs, ack dependencies, compaction."""

from __future__ import annotations

from queues.store import MessageStore
from queues.store import format as fmt

from .support import bodies, msg, power_loss, segment_files, snapshot_sizes

BODY = b"x" * 400  # ~10 messages per 4 KiB segment


def small(directory, **kw) -> MessageStore:
    kw.setdefault("segment_bytes", 4096)
    return MessageStore(directory, **kw)


def test_roll_over_names_files_by_base_id(tmp_path):
    store = small(tmp_path)
    ids = [store.append("q", msg(BODY)) for _ in range(50)]
    store.sync()
    files = segment_files(tmp_path)
    assert len(files) >= 5
    bases = [fmt.parse_segment_name(p.name) for p in files]
    assert bases == sorted(bases) and bases[0] == 1
    for p in files:
        assert p.stat().st_size <= 4096
        assert p.read_bytes()[:4] == b"AMQS"
    store.close()
    store = small(tmp_path)
    assert [r.store_id for r in store.recover()["q"]] == ids
    store.close()


def test_fully_acked_segments_are_deleted(tmp_path):
    store = small(tmp_path)
    ids = [store.append("q", msg(BODY)) for _ in range(50)]
    store.sync()
    before = len(segment_files(tmp_path))
    for sid in ids[:30]:
        store.ack("q", sid)
    store.sync()
    after = len(segment_files(tmp_path))
    assert after < before
    for sid in ids[30:]:
        store.ack("q", sid)
    store.sync()
    store.sync()
    assert len(segment_files(tmp_path)) <= 2
    store.close()
    store = small(tmp_path)
    assert store.recover() == {}
    store.close()


def test_acks_for_a_live_older_file_keep_their_file(tmp_path):
    """File B holds acks for file A's messages: while A exists, deleting B would resurrect them."""
    store = small(tmp_path, compact_ratio=0.0)  # no compaction: watch the dependency alone
    a_ids = [store.append("a", msg(BODY)) for _ in range(6)]
    keep = store.append("stuck", msg(BODY))  # keeps file A alive
    store.sync()
    first = segment_files(tmp_path)[0]
    filler = [store.append("b", msg(BODY)) for _ in range(25)]
    for sid in a_ids:
        store.ack("a", sid)  # these acks live in a later file
    for sid in filler:
        store.ack("b", sid)
    store.sync()
    store.sync()
    assert first.exists()
    sizes = snapshot_sizes(tmp_path)
    power_loss(store, sizes)
    store = small(tmp_path, compact_ratio=0.0)
    rec = store.recover()
    assert bodies(rec, "a") == [] and bodies(rec, "b") == []
    assert [r.store_id for r in rec["stuck"]] == [keep]
    store.ack("stuck", keep)
    store.sync()
    store.sync()
    assert not first.exists() and len(segment_files(tmp_path)) <= 2
    store.close()


def test_sparse_file_is_compacted_and_its_live_message_survives(tmp_path):
    store = small(tmp_path)
    stuck = store.append("stuck", msg(b"precious"))
    busy = [store.append("busy", msg(BODY)) for _ in range(60)]
    store.sync()
    first = segment_files(tmp_path)[0]
    for sid in busy:
        store.ack("busy", sid)
    for _ in range(5):
        store.sync()
    assert not first.exists(), "the stuck message was copied forward and its file deleted"
    assert len(segment_files(tmp_path)) <= 3
    assert store.read_body(stuck) == b"precious"
    store.mark_delivered("stuck", stuck)
    store.close()
    store = small(tmp_path)
    [rec] = store.recover()["stuck"]
    assert (rec.store_id, rec.message.body, rec.redelivered) == (stuck, b"precious", True)
    # compact it again (a relocated copy being relocated), then ack it
    more = [store.append("busy", msg(BODY)) for _ in range(30)]
    for sid in more:
        store.ack("busy", sid)
    store.compact()
    assert store.read_body(stuck) == b"precious"
    store.ack("stuck", stuck)
    store.compact()
    store.close()
    store = small(tmp_path)
    assert store.recover() == {}
    assert len(segment_files(tmp_path)) == 1
    store.close()


def test_crash_between_compaction_and_deletion(tmp_path):
    """The copy is written but its source not yet deleted: both exist, the copy wins."""
    store = small(tmp_path)
    stuck = store.append(["s1", "s2"], msg(b"both"))
    busy = [store.append("busy", msg(BODY)) for _ in range(20)]
    store.sync()
    for sid in busy:
        store.ack("busy", sid)
    store.ack("s1", stuck)
    store.sync()  # compaction appends the copy (buffered), deletes nothing yet
    store.sync()  # copy durable; source deleted now or on the next sync
    store.abandon()
    store = small(tmp_path)
    rec = store.recover()
    assert set(rec) == {"s2"} and rec["s2"][0].message.body == b"both"
    store.close()


def test_huge_message_gets_a_file_of_its_own(tmp_path):
    store = small(tmp_path)
    a = store.append("q", msg(b"a"))
    big = store.append("q", msg(b"B" * 20000))
    c = store.append("q", msg(b"c"))
    store.close()
    store = small(tmp_path)
    assert [len(b) for b in bodies(store.recover(), "q")] == [1, 20000, 1]
    assert [r.store_id for r in store.recover()["q"]] == [a, big, c]
    store.close()
