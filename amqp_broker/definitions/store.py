"""Durable definitions (vhosts, users, permissions, exchanges, queues, bindings, policies) in
SQLite.

Owns: one SQLite database file (stdlib ``sqlite3``, WAL journal, ``synchronous=FULL``, foreign
keys on) holding what must survive a restart, and its schema version (``PRAGMA user_version``).
Must not know: the broker's in-memory model, sockets, clocks. Single-threaded: use a store from the
thread that made it.

What to store is the caller's decision: only *durable* entities (RabbitMQ restores durable
exchanges and queues and the bindings between durable ends; transient ones and exclusive queues are
lost on restart, AMQP 0-9-1 section 1.7.2.1 / 1.7.2.2 "durable"). This module stores what it is
given; ``durable`` is kept as a column so the rule is visible in the data.

Every ``save_*``/``delete_*`` commits (and fsyncs) on return, so the broker may answer
Declare-Ok / Bind-Ok / Delete-Ok right after; ``with store.transaction():`` groups many changes
into one commit (e.g. a definitions import). Saving an existing entity replaces it.
Cascades: deleting a queue deletes the bindings to it; deleting an exchange deletes bindings from
and to it; deleting a vhost deletes everything in it and its permissions; deleting a user deletes
its permissions. Arguments (AMQP field tables) are stored losslessly (see ``codec``).
Errors: ``DefinitionsError`` (unknown vhost/user referenced, schema of a newer version, bad
destination kind); ``TypeError`` for an argument value that is not a field value; ``sqlite3.Error``
for I/O problems. Sources: SQLite "Write-Ahead Logging" and "PRAGMA synchronous"; RabbitMQ
"Definitions" (export/import format: vhosts, users, permissions, exchanges, queues, bindings).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .codec import decode_table, encode_table

__all__ = ["DefinitionsStore", "Definitions", "VHost", "User", "Permission", "ExchangeDef",
           "QueueDef", "BindingDef", "DefinitionsError", "SCHEMA_VERSION"]

SCHEMA_VERSION = 2

_SCHEMA_V1 = """
CREATE TABLE vhosts (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL DEFAULT '',
    tags TEXT NOT NULL DEFAULT ''                 -- comma-separated
);
CREATE TABLE users (
    name TEXT PRIMARY KEY,
    password_hash TEXT NOT NULL,                  -- base64, as in RabbitMQ definitions
    hashing_algorithm TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT ''                 -- comma-separated
);
CREATE TABLE permissions (
    user TEXT NOT NULL REFERENCES users(name) ON DELETE CASCADE,
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE,
    configure TEXT NOT NULL, write TEXT NOT NULL, read TEXT NOT NULL,   -- regular expressions
    PRIMARY KEY (user, vhost)
);
CREATE TABLE exchanges (
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    durable INTEGER NOT NULL, auto_delete INTEGER NOT NULL, internal INTEGER NOT NULL,
    arguments BLOB NOT NULL,                      -- codec.encode_table
    PRIMARY KEY (vhost, name)
);
CREATE TABLE queues (
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE,
    name TEXT NOT NULL,
    durable INTEGER NOT NULL, auto_delete INTEGER NOT NULL,
    arguments BLOB NOT NULL,
    PRIMARY KEY (vhost, name)
);
CREATE TABLE bindings (
    vhost TEXT NOT NULL REFERENCES vhosts(name) ON DELETE CASCADE,
    source TEXT NOT NULL,
    destination_kind TEXT NOT NULL CHECK (destination_kind IN ('queue', 'exchange')),
    destination TEXT NOT NULL,
    binding_key TEXT NOT NULL,
    arguments BLOB NOT NULL,                      -- canonical (sorted) so equal tables match
    PRIMARY KEY (vhost, source, destination_kind, destination, binding_key, arguments)
);
CREATE INDEX bindings_by_destination ON bindings (vhost, destination_kind, destination);
"""

_SCHEMA_V2 = """
CREATE TABLE policies (
    vhost TEXT NOT NULL,
    name TEXT NOT NULL,
    body TEXT NOT NULL,                           -- core.policies.Policy.encode (JSON)
    PRIMARY KEY (vhost, name)
);
"""

_MIGRATIONS: dict[int, str] = {1: _SCHEMA_V1, 2: _SCHEMA_V2}  # version -> script from version-1


class DefinitionsError(Exception):
    """A definitions request cannot be honoured (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class VHost:
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password_hash: str
    hashing_algorithm: str = "rabbit_password_hashing_sha256"
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Permission:
    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"


@dataclass(frozen=True, slots=True)
class ExchangeDef:
    vhost: str
    name: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueDef:
    vhost: str
    name: str
    durable: bool = True
    auto_delete: bool = False
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BindingDef:
    vhost: str
    source: str
    destination_kind: Literal["queue", "exchange"]
    destination: str
    binding_key: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Definitions:
    """Everything stored, each list in a stable order (by name; bindings in creation order, the
    table's rowid, which only grows).
    Restore in this order: vhosts, users, permissions, exchanges, queues, bindings."""

    vhosts: tuple[VHost, ...] = ()
    users: tuple[User, ...] = ()
    permissions: tuple[Permission, ...] = ()
    exchanges: tuple[ExchangeDef, ...] = ()
    queues: tuple[QueueDef, ...] = ()
    bindings: tuple[BindingDef, ...] = ()


def _tags(tags: tuple[str, ...] | list[str]) -> str:
    if any("," in t for t in tags):
        raise DefinitionsError("a tag may not contain ','")
    return ",".join(tags)


def _split(tags: str) -> tuple[str, ...]:
    return tuple(tags.split(",")) if tags else ()


class DefinitionsStore:
    """The definitions database at ``path`` (created with its schema when missing).

    Raises ``DefinitionsError`` when the file's schema is newer than this code knows.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._db = sqlite3.connect(self.path, isolation_level=None)  # we manage transactions
        self._depth = 0
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            self._db.close()
            raise DefinitionsError(f"{self.path}: schema version {version} is newer than "
                                   f"{SCHEMA_VERSION}; upgrade the broker")
        with self.transaction():
            for target in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[target].split(";"):
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version={target}")

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group changes into one atomic, durable commit (nestable; the outermost commits)."""
        if self._depth == 0:
            self._db.execute("BEGIN IMMEDIATE")
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            if self._depth == 0:
                self._db.execute("ROLLBACK")
            raise
        self._depth -= 1
        if self._depth == 0:
            self._db.execute("COMMIT")

    def _run(self, sql: str, params: tuple[Any, ...]) -> int:
        try:
            with self.transaction():
                return self._db.execute(sql, params).rowcount
        except sqlite3.IntegrityError as exc:
            raise DefinitionsError(f"{exc} (unknown vhost or user?)") from exc

    # -- vhosts, users, permissions ----------------------------------------------------------------
    def save_vhost(self, name: str, description: str = "", tags: tuple[str, ...] = ()) -> None:
        """Create or replace vhost ``name`` (its contents are kept)."""
        self._run("INSERT INTO vhosts VALUES (?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                  "description=excluded.description, tags=excluded.tags",
                  (name, description, _tags(tags)))

    def delete_vhost(self, name: str) -> bool:
        """Delete vhost ``name`` and everything in it; False when there was none."""
        return self._run("DELETE FROM vhosts WHERE name=?", (name,)) > 0

    def save_user(self, name: str, password_hash: str,
                  hashing_algorithm: str = "rabbit_password_hashing_sha256",
                  tags: tuple[str, ...] = ()) -> None:
        """Create or replace user ``name`` (``password_hash`` as in RabbitMQ definitions)."""
        self._run("INSERT INTO users VALUES (?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                  "password_hash=excluded.password_hash, "
                  "hashing_algorithm=excluded.hashing_algorithm, tags=excluded.tags",
                  (name, password_hash, hashing_algorithm, _tags(tags)))

    def delete_user(self, name: str) -> bool:
        """Delete user ``name`` and its permissions; False when there was none."""
        return self._run("DELETE FROM users WHERE name=?", (name,)) > 0

    def save_permission(self, user: str, vhost: str, configure: str = ".*", write: str = ".*",
                        read: str = ".*") -> None:
        """Set ``user``'s permissions in ``vhost`` (both must exist)."""
        self._run("INSERT OR REPLACE INTO permissions VALUES (?, ?, ?, ?, ?)",
                  (user, vhost, configure, write, read))

    def delete_permission(self, user: str, vhost: str) -> bool:
        """Clear ``user``'s permissions in ``vhost``."""
        return self._run("DELETE FROM permissions WHERE user=? AND vhost=?", (user, vhost)) > 0

    # -- exchanges, queues, bindings -----------------------------------------------------------------
    def save_exchange(self, vhost: str, name: str, type: str, durable: bool = True,
                      auto_delete: bool = False, internal: bool = False,
                      arguments: dict[str, Any] | None = None) -> None:
        """Create or replace an exchange (its bindings are kept)."""
        self._run("INSERT INTO exchanges VALUES (?, ?, ?, ?, ?, ?, ?) "
                  "ON CONFLICT(vhost, name) DO UPDATE SET type=excluded.type, "
                  "durable=excluded.durable, auto_delete=excluded.auto_delete, "
                  "internal=excluded.internal, arguments=excluded.arguments",
                  (vhost, name, type, durable, auto_delete, internal, encode_table(arguments)))

    def delete_exchange(self, vhost: str, name: str) -> bool:
        """Delete an exchange and every binding from or to it; False when there was none."""
        with self.transaction():
            self._db.execute("DELETE FROM bindings WHERE vhost=? AND (source=? OR "
                             "(destination_kind='exchange' AND destination=?))",
                             (vhost, name, name))
            return self._run("DELETE FROM exchanges WHERE vhost=? AND name=?", (vhost, name)) > 0

    def save_queue(self, vhost: str, name: str, durable: bool = True, auto_delete: bool = False,
                   arguments: dict[str, Any] | None = None) -> None:
        """Create or replace a queue (its bindings are kept)."""
        self._run("INSERT INTO queues VALUES (?, ?, ?, ?, ?) ON CONFLICT(vhost, name) DO UPDATE "
                  "SET durable=excluded.durable, auto_delete=excluded.auto_delete, "
                  "arguments=excluded.arguments",
                  (vhost, name, durable, auto_delete, encode_table(arguments)))

    def delete_queue(self, vhost: str, name: str) -> bool:
        """Delete a queue and every binding to it; False when there was none."""
        with self.transaction():
            self._db.execute("DELETE FROM bindings WHERE vhost=? AND destination_kind='queue' "
                             "AND destination=?", (vhost, name))
            return self._run("DELETE FROM queues WHERE vhost=? AND name=?", (vhost, name)) > 0

    def save_binding(self, vhost: str, source: str, destination_kind: str, destination: str,
                     binding_key: str, arguments: dict[str, Any] | None = None) -> None:
        """Store a binding (idempotent: the same binding twice is one binding)."""
        if destination_kind not in ("queue", "exchange"):
            raise DefinitionsError(f"destination_kind must be 'queue' or 'exchange', "
                                   f"not {destination_kind!r}")
        self._run("INSERT OR IGNORE INTO bindings VALUES (?, ?, ?, ?, ?, ?)",
                  (vhost, source, destination_kind, destination, binding_key,
                   encode_table(arguments)))

    def delete_binding(self, vhost: str, source: str, destination_kind: str, destination: str,
                       binding_key: str, arguments: dict[str, Any] | None = None) -> bool:
        """Delete one binding (arguments compared as tables); False when there was none."""
        return self._run("DELETE FROM bindings WHERE vhost=? AND source=? AND destination_kind=? "
                         "AND destination=? AND binding_key=? AND arguments=?",
                         (vhost, source, destination_kind, destination, binding_key,
                          encode_table(arguments))) > 0

    # -- policies (issue 12) ---------------------------------------------------------------------------
    def save_policy(self, vhost: str, name: str, body: str) -> None:
        """Create or replace policy ``name`` of ``vhost``; ``body`` is its JSON text
        (``core.policies.Policy.encode``, not interpreted here)."""
        self._run("INSERT INTO policies VALUES (?, ?, ?) ON CONFLICT(vhost, name) DO UPDATE SET "
                  "body=excluded.body", (vhost, name, body))

    def delete_policy(self, vhost: str, name: str) -> bool:
        """Delete a policy; False when there was none."""
        return self._run("DELETE FROM policies WHERE vhost=? AND name=?", (vhost, name)) > 0

    def load_policies(self) -> list[tuple[str, str, str]]:
        """Every stored policy as (vhost, name, body), sorted by vhost and name."""
        return list(self._db.execute("SELECT vhost, name, body FROM policies "
                                     "ORDER BY vhost, name"))

    # -- reading -------------------------------------------------------------------------------------
    def load(self) -> Definitions:
        """Everything stored (see ``Definitions`` for the order)."""
        q = self._db.execute
        return Definitions(
            vhosts=tuple(VHost(n, d, _split(t)) for n, d, t in
                         q("SELECT name, description, tags FROM vhosts ORDER BY name")),
            users=tuple(User(n, h, a, _split(t)) for n, h, a, t in
                        q("SELECT name, password_hash, hashing_algorithm, tags FROM users "
                          "ORDER BY name")),
            permissions=tuple(Permission(*row) for row in
                              q("SELECT user, vhost, configure, write, read FROM permissions "
                                "ORDER BY user, vhost")),
            exchanges=tuple(ExchangeDef(v, n, t, bool(d), bool(a), bool(i), decode_table(args))
                            for v, n, t, d, a, i, args in
                            q("SELECT vhost, name, type, durable, auto_delete, internal, "
                              "arguments FROM exchanges ORDER BY vhost, name")),
            queues=tuple(QueueDef(v, n, bool(d), bool(a), decode_table(args))
                         for v, n, d, a, args in
                         q("SELECT vhost, name, durable, auto_delete, arguments FROM queues "
                           "ORDER BY vhost, name")),
            bindings=tuple(BindingDef(v, s, k, d, b, decode_table(args))
                           for v, s, k, d, b, args in
                           q("SELECT vhost, source, destination_kind, destination, binding_key, "
                             "arguments FROM bindings ORDER BY rowid")),
        )

    def close(self) -> None:
        """Close the database (a WAL checkpoint happens on the last close). Idempotent."""
        self._db.close()

    def __enter__(self) -> DefinitionsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
