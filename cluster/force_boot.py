"""``force_boot``: an operator's request that a stopped member start alone next time.

Owns the marker file in a broker's data dir (RabbitMQ's ``rabbitmqctl force_boot`` writes
``force_load`` in the node's data dir the same way; "Clustering" guide, "Restarting Cluster
Nodes"). Without it a member restarted after a full power loss serves definition changes only
once a majority of its last metadata configuration is back (Raft); with it, at its next start it
founds a view of one and makes itself the only member of the metadata configuration
(``cluster.raft.node.RaftNode.force_configuration``), then the marker is removed (once the
broker follows the log). Changes the lost members committed after this member's last entry are
lost, and those members must not come back with their old data: reset them (empty data dir)
and let them join afresh. Must not know: the broker (``amqp-broker ctl force_boot`` writes it
with the standard library only).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MARKER", "request", "requested", "clear"]

#: The marker's name in the data dir.
MARKER = "force_boot"


def request(data_dir: Path | str) -> Path:
    """Write the marker in ``data_dir`` (durably: fsync of the file and of the directory) and
    return its path. Raises ``FileNotFoundError`` when ``data_dir`` is no directory, ``OSError``
    for a failed write."""
    directory = Path(data_dir)
    if not directory.is_dir():
        raise FileNotFoundError(f"no data directory {directory}")
    path = directory / MARKER
    with open(path, "wb") as f:
        f.write(b"force_boot\n")
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def requested(data_dir: Path | str) -> bool:
    """True when ``data_dir`` holds the marker."""
    return (Path(data_dir) / MARKER).exists()


def clear(data_dir: Path | str) -> None:
    """Remove the marker (none: nothing to do). Raises ``OSError`` for a failed removal."""
    try:
        os.unlink(Path(data_dir) / MARKER)
    except FileNotFoundError:
        pass
