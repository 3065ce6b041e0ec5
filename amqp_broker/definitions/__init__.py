"""Durable definitions of the broker (issue 4): vhosts, users, permissions, durable exchanges,
queues and bindings, kept in SQLite and restored on start.

Usage (the broker core wires it; see ``store`` for the contract)::

    defs = DefinitionsStore(data_dir / "definitions.sqlite3")
    restored = defs.load()                 # on start: recreate vhosts .. bindings in this order
    defs.save_queue("/", "orders", durable=True, arguments={"x-max-length": 10})  # on declare
    defs.delete_queue("/", "orders")        # on delete (its bindings go too)

Must not know: the broker's objects, sockets, the message store (``queues.store``).
"""

from .codec import decode_table, encode_table
from .store import (
    SCHEMA_VERSION,
    BindingDef,
    Definitions,
    DefinitionsError,
    DefinitionsStore,
    ExchangeDef,
    Permission,
    QueueDef,
    User,
    VHost,
)

__all__ = ["DefinitionsStore", "Definitions", "VHost", "User", "Permission", "ExchangeDef",
           "QueueDef", "BindingDef", "DefinitionsError", "SCHEMA_VERSION", "encode_table",
           "decode_table"]
