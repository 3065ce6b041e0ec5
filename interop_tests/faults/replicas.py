"""After a run: every replica of each quorum queue read from its files, and compared.

Read offline, once the brokers are stopped (kill -9 after the drain: the page cache holds every
byte written), from a copy of each replica directory ``<data dir>/quorum/<group>/`` opened with
the broker's own ``cluster.raft.disklog.DiskLog`` (the copy, because opening a log cuts torn tails
and writes marks): what that replica would recover with. Nothing is asked of the running brokers
and nothing is added to them for it. The state machine (``cluster.quorum.machine.QuorumMachine``
with the workload queue's configuration, no arguments) is rebuilt on each replica from its
snapshot and its log.

What must hold after the heal and the drain, with every broker up and quiet for seconds:

- **no divergence**: at every log index that two replicas hold, they hold the same entry (term,
  kind, bytes) -- Raft's log matching, and with it "same messages in the same order";
- **one state**: at the newest index every replica can reach (each from its own snapshot), and at
  every replica's snapshot index, the machines' states are equal byte for byte (messages, their
  order, delivery counts, consumers): a snapshot is the state the others reach through their log;
- **caught up**: every replica ends at the same (index, term); one behind after seconds of quiet
  is reported as ``lagging`` (a follower the leader does not bring back is a bug too).

A replica whose files say it lost acknowledged entries (``DiskLog.lost``) is listed in
``recovering`` (informational: it catches up; it counts only through the checks above).

A replicated stream's Raft group lives in the same place with the same files
(``amqp_broker.clustering.stream``: ``<data dir>/quorum/<group>/``), so it is compared the same way
with its own machine (``compare_groups(..., stream=True)``: ``cluster.stream.machine.StreamMachine``,
whose state is the offsets and per-origin seqs); the records themselves are in each replica's
segment files, compared by :mod:`interop_tests.faults.stream_replicas`.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.quorum.machine import QuorumMachine
from cluster.raft.disklog import DiskLog
from cluster.raft.fifo import FifoConfig
from cluster.raft.messages import EntryKind, PersistentState
from cluster.stream.machine import StreamMachine

__all__ = ["GroupReport", "compare", "compare_groups", "read_replica"]

_LOG_FILES = ("state", "snapshot", "marks")


def read_replica(directory: Path, scratch: Path) -> tuple[PersistentState, str | None]:
    """(what ``DiskLog`` loads, its ``lost``) for the replica in ``directory``, opened from a
    copy in ``scratch`` (made here). Raises ``OSError`` / ``FormatError``."""
    scratch.mkdir(parents=True, exist_ok=True)
    for path in directory.iterdir():
        if path.is_file() and (path.suffix == ".seg" or path.name in _LOG_FILES):
            shutil.copyfile(path, scratch / path.name)
    log = DiskLog(scratch, fsync=False)
    try:
        return log.load(), log.lost
    finally:
        log.close()


def _quorum_machine() -> QuorumMachine:
    return QuorumMachine(FifoConfig())


def _states_at(state: PersistentState, checkpoints: list[int],
               new_machine: Callable[[], Any] = _quorum_machine) -> tuple[dict[int, bytes], Any]:
    """The machine's state (``snapshot()`` bytes) of replica ``state`` at each of the sorted
    ``checkpoints`` it can reach (from its snapshot on, up to its last entry), and the machine
    at the last one reached (``new_machine()`` makes an empty one)."""
    machine = new_machine()
    if state.snapshot.index:
        machine.restore(state.snapshot.data)
    at = state.snapshot.index
    out: dict[int, bytes] = {}
    todo = [c for c in checkpoints if c >= at]
    entries = iter(state.entries)
    for cp in todo:
        while at < cp:
            e = next(entries, None)
            if e is None:
                return out, machine
            if e.kind is EntryKind.COMMAND:
                machine.apply(e.index, e.data)
            at = e.index
        out[cp] = machine.snapshot()
    return out, machine


def _message_count(machine: Any) -> int:
    """How many messages the machine holds: ready ones plus those checked out to consumers.
    Read from the machine's queue, not its snapshot bytes: a paged snapshot (format 3,
    ``cluster.quorum.machine.PAGED_SNAPSHOT``) starts with a binary floor, and its paged
    messages carry no body. A stream's machine: the stream's length."""
    if isinstance(machine, StreamMachine):
        return machine.length
    fifo = machine.fifo
    return len(fifo.ready_messages()) + sum(len(c.out) for c in fifo.consumers.values())


@dataclass
class GroupReport:
    """The comparison of one group's replicas (see the module docstring): ``last`` per replica
    (index, term); ``diverged_at``: the first index two replicas hold differently (None: none);
    ``lagging``: replicas behind the newest (index, term); ``state_index``: the newest index all
    can reach (or the index of a mismatch); ``state_mismatch``: ``name@index`` of replicas whose
    state differs from the others' there (at that index and at each replica's snapshot index);
    ``messages``: per replica, the message ids the queue holds there; ``recovering``: replicas
    whose files lost acknowledged entries (``DiskLog.lost``); ``errors``: replicas that could not
    be read."""

    group: str
    last: dict[str, tuple[int, int]] = field(default_factory=dict)
    diverged_at: int | None = None
    diverged: dict[str, Any] = field(default_factory=dict)
    lagging: dict[str, int] = field(default_factory=dict)
    state_index: int = 0
    state_mismatch: list[str] = field(default_factory=list)
    messages: dict[str, int] = field(default_factory=dict)
    recovering: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        """What broke a rule, in words (empty: the replicas agree)."""
        out = []
        if self.diverged_at is not None:
            out.append(f"group {self.group}: replicas diverge at index {self.diverged_at}: "
                       f"{self.diverged}")
        if self.state_mismatch:
            out.append(f"group {self.group}: states differ at index {self.state_index}: "
                       f"{', '.join(self.state_mismatch)}")
        if self.lagging:
            out.append(f"group {self.group}: replicas behind {max(self.last.values())}: "
                       f"{self.lagging}")
        out += [f"group {self.group}: {name} unreadable: {err}"
                for name, err in self.errors.items()]
        return out

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"group": self.group, "last": {k: list(v) for k, v in self.last.items()},
                "diverged_at": self.diverged_at, "diverged": self.diverged,
                "lagging": self.lagging, "state_index": self.state_index,
                "state_mismatch": self.state_mismatch, "messages": self.messages,
                "recovering": self.recovering, "errors": self.errors,
                "problems": self.problems}


def compare(group: str, states: dict[str, PersistentState],
            new_machine: Callable[[], Any] = _quorum_machine) -> GroupReport:
    """Compare the replicas ``states`` (by broker name) of one group (pure); ``new_machine``
    makes the group's empty state machine (a quorum queue's by default)."""
    report = GroupReport(group)
    if not states:
        return report
    held: dict[int, dict[str, tuple[int, int, bytes]]] = {}
    for name, st in states.items():
        last = st.entries[-1] if st.entries else None
        report.last[name] = (last.index, last.term) if last else (st.snapshot.index,
                                                                  st.snapshot.term)
        for e in st.entries:
            held.setdefault(e.index, {})[name] = (e.term, int(e.kind), e.data)
    for index in sorted(held):
        if len(set(held[index].values())) > 1:
            report.diverged_at = index
            report.diverged = {n: [t, k, len(d)] for n, (t, k, d) in held[index].items()}
            break
    newest = max(report.last.values())
    report.lagging = {n: last[0] for n, last in report.last.items() if last != newest}
    upto = min(last[0] for last in report.last.values())
    upto = max(upto, max(st.snapshot.index for st in states.values()))
    report.state_index = upto
    # the states are compared at the newest common index and at each replica's snapshot: a
    # snapshot must be the state the others reach by applying their logs
    checkpoints = sorted({upto, *(st.snapshot.index for st in states.values()
                                  if st.snapshot.index)})
    seen: dict[int, dict[str, bytes]] = {}
    for name, st in states.items():
        at, machine = _states_at(st, checkpoints, new_machine)
        for cp, snap in at.items():
            seen.setdefault(cp, {})[name] = snap
        if upto in at:
            report.messages[name] = _message_count(machine)
    for cp in checkpoints:
        snaps = seen.get(cp, {})
        counts: dict[bytes, int] = {}
        for snap in snaps.values():
            counts[snap] = counts.get(snap, 0) + 1
        if len(counts) > 1:
            usual = max(counts, key=lambda b: counts[b])
            report.state_mismatch += [f"{n}@{cp}" for n, b in snaps.items() if b != usual]
            report.state_index = cp
    return report


def compare_groups(data_dirs: dict[str, Path], scratch: Path | None = None,
                   stream: bool = False) -> list[GroupReport]:
    """Read and compare every quorum group found under the brokers' ``data_dirs`` (by name):
    each replica directory holding a log (segment files); ``stream``: the groups are replicated
    streams' (their machine is ``StreamMachine``). Raises nothing for a replica it cannot read:
    that is the report's ``errors``."""
    groups: dict[str, dict[str, Path]] = {}
    for name, data_dir in data_dirs.items():
        root = data_dir / "quorum"
        if not root.is_dir():
            continue
        for directory in sorted(root.iterdir()):
            if directory.is_dir() and any(p.suffix == ".seg" for p in directory.iterdir()):
                groups.setdefault(directory.name, {})[name] = directory
    reports = []
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        for group, dirs in sorted(groups.items()):
            states: dict[str, PersistentState] = {}
            errors: dict[str, str] = {}
            recovering: dict[str, str] = {}
            for name, directory in dirs.items():
                try:
                    states[name], lost = read_replica(directory, Path(tmp) / group / name)
                except Exception as exc:   # noqa: BLE001 -- any failure is the finding
                    errors[name] = f"{type(exc).__name__}: {exc}"
                    continue
                floor = states[name].floor
                if lost or floor:
                    recovering[name] = lost or f"catching up to index {floor}"
            report = compare(group, states, StreamMachine if stream else _quorum_machine)
            report.errors, report.recovering = errors, recovering
            reports.append(report)
    return reports
