"""The ``corrupt`` nemesis: one broker's files damaged while it is down, then restarted.

Each fault picks one broker (the quorum queue's Raft leader half the time when it is known, else
any: never more than one, so a majority always holds what was committed), takes a copy of its
files (:class:`Stash`, the "older copy" a later fault may put back), lets the workload run for
half the fault, kills it with SIGKILL, damages one of its files, and restarts it after the fault
with the same data dir, name and address. The damage (:func:`damage`), one of:

- ``flip``: 1 to 3 random bits flipped at random offsets (header bytes included);
- ``truncate``: the file cut to a random length below its size;
- ``older``: the file replaced by its copy from an earlier moment of the run (a stash copy that
  differs from it now, at least one fault old or taken half a fault before the kill).

Files (:func:`candidates`): in every quorum replica directory ``quorum/<group>/`` its Raft log
segments, ``state`` (term and vote), ``snapshot``, ``marks`` and ``members.json``; the broker's
``cluster-membership.json`` (its durable vote in the cluster view); and with quorum queues the
classic message store's segments ``messages/*.seg``. With classic queues the message store is
left alone: a classic queue keeps one copy of a message, on the broker it was published to, and
damaging it loses those messages on RabbitMQ too (a disk failure of a single node); the nemesis
then damages ``cluster-membership.json`` only. Jepsen's file-corruption nemeses (its NATS 2.12.1
analysis, 2025: bit flips and truncations of a minority's data files; snapshots of files restored
later) are the model. History events: ``corrupt-copy`` (the stash took a copy), ``kill``,
``corrupt`` (broker, file relative to its data dir, ``damage`` and what it changed),
``restart``.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .kills import queue_leader
from .nemesis import NEMESES, REJOIN_TIMEOUT, Context, _await_rejoin

__all__ = ["ACTIONS", "Stash", "candidates", "corrupt", "damage", "flip_bits", "truncate"]

ACTIONS = ("flip", "truncate", "older")
#: Copies of one broker's files kept in the stash (the oldest go first).
KEEP = 3


def candidates(data_dir: Path, queue_type: str) -> list[Path]:
    """The files of ``data_dir`` the nemesis may damage (see the module docstring), sorted;
    only non-empty regular files."""
    found: list[Path] = []
    quorum = data_dir / "quorum"
    if quorum.is_dir():
        for group in sorted(p for p in quorum.iterdir() if p.is_dir()):
            found += [p for p in sorted(group.iterdir())
                      if p.suffix == ".seg" or p.name in ("state", "snapshot", "marks",
                                                          "members.json")]
    found.append(data_dir / "cluster-membership.json")
    if queue_type == "quorum":
        found += sorted((data_dir / "messages").glob("*.seg"))
    return [p for p in found if p.is_file() and p.stat().st_size > 0]


def flip_bits(path: Path, rng: random.Random) -> dict[str, Any]:
    """Flip 1 to 3 random bits of ``path`` in place; returns ``{"bits": [[offset, bit], ...]}``.
    Raises ``OSError``; ``ValueError`` for an empty file."""
    data = bytearray(path.read_bytes())
    if not data:
        raise ValueError(f"{path} is empty")
    flips: set[tuple[int, int]] = set()
    for _ in range(rng.randint(1, 3)):
        flips.add((rng.randrange(len(data)), rng.randrange(8)))   # distinct: none undone
    for offset, bit in flips:
        data[offset] ^= 1 << bit
    path.write_bytes(bytes(data))
    return {"bits": sorted(flips), "size": len(data)}


def truncate(path: Path, rng: random.Random) -> dict[str, Any]:
    """Cut ``path`` to a random length below its size; returns ``{"from": size, "to": n}``.
    Raises ``OSError``."""
    size = path.stat().st_size
    to = rng.randrange(size) if size else 0
    with open(path, "r+b") as f:
        f.truncate(to)
    return {"from": size, "to": to}


@dataclass
class Stash:
    """Copies of brokers' files taken during a run, under ``root``: ``root/<broker>/<n>/<the
    file's path in its data dir>``; at most ``KEEP`` copies per broker."""

    root: Path
    taken: dict[str, list[Path]] = field(default_factory=dict)
    count: int = 0

    def save(self, name: str, data_dir: Path, queue_type: str) -> int:
        """Copy every candidate file of broker ``name`` (running: a file may be caught mid-write,
        as any copy of a live file); returns how many files were copied."""
        self.count += 1
        dest = self.root / name / str(self.count)
        copied = 0
        for path in candidates(data_dir, queue_type):
            target = dest / path.relative_to(data_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copyfile(path, target)
                copied += 1
            except OSError:   # gone meanwhile (a segment deleted after a snapshot)
                continue
        copies = self.taken.setdefault(name, [])
        copies.append(dest)
        while len(copies) > KEEP:
            shutil.rmtree(copies.pop(0), ignore_errors=True)
        return copied

    def older(self, name: str, data_dir: Path, path: Path) -> Path | None:
        """The newest stashed copy of ``path`` (a file of broker ``name``) that differs from it
        now; None when there is none."""
        rel = path.relative_to(data_dir)
        now = path.read_bytes()
        for copy in reversed(self.taken.get(name, [])):
            old = copy / rel
            if old.is_file() and old.read_bytes() != now:
                return old
        return None


def damage(name: str, data_dir: Path, queue_type: str, stash: Stash,
           rng: random.Random) -> dict[str, Any]:
    """Damage one file of broker ``name`` (stopped): pick an action, then a file it applies to
    (``older`` needs a differing stash copy; without one another action is taken). Returns the
    history details: ``file`` (relative), ``damage`` (the action) and what changed;
    ``{"damage": "none"}``
    when the broker has no candidate file. Raises ``OSError``."""
    files = candidates(data_dir, queue_type)
    if not files:
        return {"damage": "none"}
    for action in rng.sample(ACTIONS, len(ACTIONS)):
        if action == "older":
            olds = [(p, o) for p in files if (o := stash.older(name, data_dir, p)) is not None]
            if not olds:
                continue
            path, old = rng.choice(olds)
            size = path.stat().st_size
            shutil.copyfile(old, path)
            return {"file": str(path.relative_to(data_dir)), "damage": "older",
                    "from": size, "to": path.stat().st_size,
                    "copy": str(old.relative_to(stash.root).parts[1])}
        path = rng.choice(files)
        details = flip_bits(path, rng) if action == "flip" else truncate(path, rng)
        return {"file": str(path.relative_to(data_dir)), "damage": action, **details}
    raise AssertionError("unreachable: flip and truncate always apply")


def _pick(ctx: Context) -> tuple[int, str]:
    leader = queue_leader(ctx) if ctx.queue_type == "quorum" else None
    if leader is not None and ctx.rng.random() < 0.5:
        return leader, "queue-leader"
    return ctx.rng.randrange(len(ctx.brokers)), "random"


def corrupt(ctx: Context, duration: float) -> None:
    """One ``corrupt`` fault (see the module docstring): copy, wait ``duration / 2``, kill -9,
    damage one file, wait ``duration / 2``, restart, wait (``REJOIN_TIMEOUT``) for one view."""
    stash = ctx.state.setdefault("stash", Stash(ctx.brokers.base / "stash"))
    target, kind = _pick(ctx)
    b = ctx.brokers[target]
    ctx.record("corrupt-copy", target=b.name,
               files=stash.save(b.name, b.data_dir, ctx.queue_type))
    if not ctx.sleep(duration / 2):
        return
    ctx.brokers.kill(target)
    ctx.record("kill", target=b.name, kind=kind)
    try:
        ctx.record("corrupt", target=b.name,
                   **damage(b.name, b.data_dir, ctx.queue_type, stash, ctx.rng))
        ctx.sleep(duration / 2)
    finally:
        ctx.brokers.start(target)
        ctx.record("restart", target=b.name)
    _await_rejoin(ctx, b.name, REJOIN_TIMEOUT)


NEMESES["corrupt"] = corrupt
