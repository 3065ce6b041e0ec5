"""The brokers' logs after a run: Python tracebacks (a failure: a broker met something it did
not handle), and the replicas that found at start that their files had lost acknowledged
entries (information: ``cluster.raft.disklog`` logs it, and the replica catches up).

A traceback is a line starting ``Traceback (most recent call last):`` in ``<run>/nK.log`` (the
broker's stdout and stderr, appended across restarts), or the head of an exception group as
Python prints it (``  + Exception Group Traceback (most recent call last):``: an anyio task group
that stopped the broker; the tracebacks nested in it, indented after ``|``, are not counted
again); its excerpt is that line and up to ``EXCERPT`` lines after it, up to the next log record
(a line starting with a date).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LOSS_MARK", "TRACEBACK", "LogFindings", "scan_log", "scan_logs"]

TRACEBACK = "Traceback (most recent call last):"
LOSS_MARK = "lost entries it had acknowledged"
EXCERPT = 30
_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_GROUP = re.compile(r"^ *\+ Exception Group Traceback \(most recent call last\):")


@dataclass
class LogFindings:
    """What the logs of one run hold: ``tracebacks`` and ``losses`` (replica opened with a
    loss) counted per broker name, and the first traceback of each broker (``excerpts``)."""

    tracebacks: dict[str, int] = field(default_factory=dict)
    losses: dict[str, int] = field(default_factory=dict)
    excerpts: dict[str, str] = field(default_factory=dict)

    @property
    def traceback_count(self) -> int:
        """Tracebacks in every log."""
        return sum(self.tracebacks.values())

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"tracebacks": self.tracebacks, "losses": self.losses, "excerpts": self.excerpts}


def scan_log(text: str) -> tuple[int, int, str]:
    """(tracebacks, loss lines, first traceback's excerpt or "") of one log's ``text``."""
    lines = text.splitlines()
    tracebacks = losses = 0
    excerpt = ""
    for i, line in enumerate(lines):
        if line.startswith(TRACEBACK) or _GROUP.match(line):
            tracebacks += 1
            if not excerpt:
                block = [line]
                for more in lines[i + 1:i + 1 + EXCERPT]:
                    if _RECORD.match(more) or more.startswith("===="):
                        break
                    block.append(more)
                excerpt = "\n".join(block)
        if LOSS_MARK in line:
            losses += 1
    return tracebacks, losses, excerpt


def scan_logs(logs: dict[str, Path]) -> LogFindings:
    """Scan each broker's log (by name); a missing log counts nothing."""
    found = LogFindings()
    for name, path in logs.items():
        try:
            text = path.read_text(errors="replace")
        except OSError:
            text = ""
        tracebacks, losses, excerpt = scan_log(text)
        found.tracebacks[name] = tracebacks
        found.losses[name] = losses
        if excerpt:
            found.excerpts[name] = excerpt
    return found
