"""The ``corrupt`` nemesis's file damage, on files laid out as a broker's data dir (no broker)."""

from __future__ import annotations

import random
from pathlib import Path

from interop_tests.faults.corrupt import Stash, candidates, damage, flip_bits, truncate


def data_dir(root: Path) -> Path:
    group = root / "quorum" / "g1"
    group.mkdir(parents=True)
    (group / "00000000000000000001.seg").write_bytes(b"s" * 500)
    (group / "state").write_bytes(b"t" * 30)
    (group / "marks").write_bytes(b"m" * 40)
    (group / "members.json").write_text('{"index": 1, "members": ["n1"]}')
    (group / "snapshot.tmp").write_bytes(b"x")      # not a candidate
    (root / "messages").mkdir()
    (root / "messages" / "00000000000000000001.seg").write_bytes(b"q" * 100)
    (root / "cluster-membership.json").write_text('{"version": 1}')
    (root / "definitions.db").write_bytes(b"sqlite")  # not a candidate
    return root


def names(paths: list[Path], root: Path) -> list[str]:
    return [str(p.relative_to(root)) for p in paths]


def test_candidates_are_the_replica_files_the_vote_and_with_quorum_the_store(tmp_path: Path
                                                                            ) -> None:
    root = data_dir(tmp_path)
    assert names(candidates(root, "quorum"), root) == [
        "quorum/g1/00000000000000000001.seg", "quorum/g1/marks", "quorum/g1/members.json",
        "quorum/g1/state", "cluster-membership.json", "messages/00000000000000000001.seg"]
    assert "messages/00000000000000000001.seg" not in names(candidates(root, "classic"), root)


def test_flip_changes_one_to_three_bits_and_truncate_shortens(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(1000))
    rng = random.Random(3)
    done = flip_bits(path, rng)
    changed = sum(bin(b).count("1") for b in path.read_bytes())
    assert 1 <= changed <= 3 and len(done["bits"]) == changed and done["size"] == 1000
    done = truncate(path, rng)
    assert done["from"] == 1000 and done["to"] < 1000 == done["from"]
    assert path.stat().st_size == done["to"]


def test_an_older_copy_is_one_that_differs_from_the_file_now(tmp_path: Path) -> None:
    root = data_dir(tmp_path / "n1")
    stash = Stash(tmp_path / "stash")
    seg = root / "quorum" / "g1" / "00000000000000000001.seg"
    stash.save("n1", root, "quorum")
    assert stash.older("n1", root, seg) is None           # the same bytes: not older
    seg.write_bytes(b"s" * 800)                             # the log grew
    old = stash.older("n1", root, seg)
    assert old is not None and old.read_bytes() == b"s" * 500
    for _ in range(5):                                       # only the newest copies are kept
        stash.save("n1", root, "quorum")
    assert len(stash.taken["n1"]) == 3 and len(list((tmp_path / "stash" / "n1").iterdir())) == 3


def test_damage_puts_back_an_older_copy_or_flips_or_truncates(tmp_path: Path) -> None:
    root = data_dir(tmp_path / "n1")
    stash = Stash(tmp_path / "stash")
    stash.save("n1", root, "quorum")
    seg = root / "quorum" / "g1" / "00000000000000000001.seg"
    seg.write_bytes(b"s" * 800)
    seen = set()
    for seed in range(30):
        before = {p: p.read_bytes() for p in candidates(root, "quorum")}
        done = damage("n1", root, "quorum", stash, random.Random(seed))
        seen.add(done["damage"])
        path = root / done["file"]
        assert path.read_bytes() != before[path] or done["damage"] == "truncate"
        if done["damage"] == "older":
            assert done["file"] == "quorum/g1/00000000000000000001.seg"
            assert path.read_bytes() == b"s" * 500
        for p, data in before.items():     # one file damaged, the others untouched
            if p != path and p.exists():
                assert p.read_bytes() == data
        seg.write_bytes(b"s" * 800)
        for p, data in before.items():
            if p != seg:
                p.write_bytes(data)
    assert seen == {"flip", "truncate", "older"}
