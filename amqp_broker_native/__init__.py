"""The compiled hot path: which modules mypyc compiles, and whether this process runs them.

Owns the list of hot-path modules (``MODULES``: frame split, content assembly, publish, route,
enqueue, deliver, encode; both ends of the cluster relay; and the quorum queues' Raft core, state
machine and group) that ``setup.py`` compiles with mypyc when the project is installed, and the one
decision per process between their compiled builds and their Python source (``ACTIVE``).
The Python source stays the one truth: the builds live apart from it, in ``_lib/`` of this
package (``_lib/amqp_broker/protocol/framing.*.so``, ``_lib/hotpath__mypyc.*.so`` and a manifest
of the sources they were built from), and each package holding a compiled module calls
``extend_path`` first thing in its ``__init__``, which puts its directory under ``_lib/`` first
on the package's ``__path__`` when ``ACTIVE``.

``ACTIVE`` is False (every module runs from source) when ``AMQP_BROKER_PURE`` is set to anything
but "" or "0", when there is no build (no C compiler or no mypyc at install: the install goes on
without one), or when a source changed since the build (``make native`` rebuilds; a warning says
so). The choice is all or nothing: compiled modules call each other's native classes directly,
so a mix of compiled and source modules of one build would not work.

``python -m amqp_broker_native`` prints which it is and exits 0 when compiled, 1 when not.
Source: mypyc documentation, "Using mypyc" / "Native classes" (mypyc.readthedocs.io).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

__all__ = ["ACTIVE", "GROUP", "LIB", "MODULES", "PURE_ENV", "REASON", "STALE", "extend_path",
           "source_digests"]

#: The compiled modules, in no particular order (one mypyc group: calls between them are C calls).
MODULES: tuple[str, ...] = (
    "amqp_broker.protocol.constants",
    "amqp_broker.protocol.errors",
    "amqp_broker.protocol.framing",
    "amqp_broker.protocol.assembler",
    "amqp_broker.protocol.delivery",
    "amqp_broker.protocol.methods",
    "amqp_broker.core.access",
    "amqp_broker.core.broker",
    "amqp_broker.core.channel",
    "amqp_broker.core.confirms",
    "amqp_broker.core.connection",
    "amqp_broker.core.consumer",
    "amqp_broker.core.counts",
    "amqp_broker.core.vhost",
    "amqp_broker.core.handlers.basic",
    "amqp_broker.core.relay",
    "amqp_broker.core.relay_inbox",
    "amqp_broker.core.relay_batch",
    "queues.entry",
    "queues.message",
    "queues.consumers",
    "queues.ready_list",
    "queues.paged_list",
    "queues.queue_view",
    "queues.discards",
    "queues.queue",
    "routing.table",
    "cluster.relay_wire",
    "cluster.driver",
    # quorum queues (issue 12): the Raft core, the queue's state machine, the group around it
    "cluster.raft.messages",
    "cluster.raft.actions",
    "cluster.raft.progress",
    "cluster.raft.raftlog",
    "cluster.raft.leader",
    "cluster.raft.node",
    "cluster.raft.codec",
    "cluster.raft.fifo_commands",
    "cluster.raft.fifo_ready",
    "cluster.raft.fifo",
    "cluster.quorum.machine",
    "cluster.quorum.outbox",
    "cluster.raftgroup",   # QuorumGroup's base class (a native class extends native ones only)
    "cluster.quorum.group",
    "cluster.quorum.queue",
)
#: Set to anything but "" or "0": run every module from its Python source.
PURE_ENV = "AMQP_BROKER_PURE"
#: Where the builds are (beside this file, in an installed tree and in an editable checkout).
LIB = Path(__file__).resolve().parent / "_lib"
#: The mypyc group: its shared library is ``<GROUP>__mypyc``, imported by every module's shim.
GROUP = "amqp_broker_native._lib.hotpath"
_ROOT = Path(__file__).resolve().parent.parent  # where the packages are, installed or not


def source_digests(root: Path = _ROOT) -> dict[str, str]:
    """SHA-256 (hex) of each compiled module's source file under ``root``, by module name;
    raises ``OSError`` when one is missing."""
    return {mod: hashlib.sha256(root.joinpath(*mod.split(".")).with_suffix(".py").read_bytes())
            .hexdigest() for mod in MODULES}


def _built(path: Path) -> bool:
    """True when an extension module for this interpreter exists at ``path`` (no suffix)."""
    return any(path.with_name(path.name + suffix).is_file() for suffix in EXTENSION_SUFFIXES)


def _decide() -> tuple[bool, str]:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return False, f"pure Python ({PURE_ENV} is set)"
    try:
        built_from = json.loads((LIB / "manifest.json").read_text())["sources"]
    except (OSError, ValueError, KeyError, TypeError):
        return False, "pure Python (not compiled: no mypyc build was made at install)"
    added = [mod for mod in MODULES if mod not in built_from]
    if added:  # a module joined MODULES since the build: rebuilding compiles it too
        return False, (f"pure Python (the mypyc build is stale: {', '.join(added)} added since; "
                       "`make native` rebuilds it)")
    libname = GROUP.rsplit(".", 1)[1] + "__mypyc"
    missing = [mod for mod in MODULES if not _built(LIB.joinpath(*mod.split(".")))]
    if missing or not _built(LIB / libname):
        return False, ("pure Python (the mypyc build does not fit this interpreter or misses "
                       f"{', '.join(missing) or libname})")
    try:
        now = source_digests()
    except OSError as exc:
        return False, f"pure Python (source unreadable: {exc})"
    changed = [mod for mod in MODULES if built_from.get(mod) != now[mod]]
    if changed:
        return False, (f"pure Python (the mypyc build is stale: {', '.join(changed)} changed "
                       "since; `make native` rebuilds it)")
    return True, "compiled (mypyc)"


ACTIVE, REASON = _decide()
#: True when a build exists but a compiled module's source changed since (so ``ACTIVE`` is False).
STALE = "stale" in REASON
if STALE:
    warnings.warn(f"amqp-broker hot path runs {REASON}", RuntimeWarning, stacklevel=2)


def extend_path(path: list[str], package: str) -> None:
    """Put the compiled modules of ``package`` (its dotted name) first on its ``__path__``
    (``path``, changed in place) when ``ACTIVE``; nothing otherwise. Call it first thing in the
    package's ``__init__``, before it imports any of its modules."""
    if ACTIVE:
        where = str(LIB.joinpath(*package.split(".")))
        if where not in path:
            path.insert(0, where)
