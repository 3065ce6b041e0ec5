"""The topology a connection declared, recorded so it can be replayed after a reconnect.

Owns: exchanges, queues (server-named ones are redeclared and renamed, their bindings and
consumers follow the new name), queue and exchange bindings, in declaration order; deletions and
unbinds forget entries. Consumers live with their channels (``Channel._recover_consumers``).
Modelled on pika's and aio-pika's robust connections. Must not know: sockets.
"""

from __future__ import annotations

import logging
from typing import Any

from pamqp import commands as cmd

from .channel import Channel
from .errors import ChannelClosed

__all__ = ["Topology"]

log = logging.getLogger(__name__)


class Topology:
    """What this connection declared, replayed after a reconnect (in declaration order)."""

    def __init__(self) -> None:
        self.exchanges: dict[str, dict] = {}
        self.queues: dict[str, dict] = {}
        self.bindings: dict[tuple, tuple] = {}
        self.renamed: dict[str, str] = {}

    @staticmethod
    def _key(kind: str, dest: str, source: str, rkey: str, args: dict | None) -> tuple:
        return (kind, dest, source, rkey, repr(sorted((args or {}).items())))

    def add_binding(self, kind: str, dest: str, source: str, rkey: str, args: dict | None) -> None:
        self.bindings[self._key(kind, dest, source, rkey, args)] = (kind, dest, source, rkey, args)

    def remove_binding(self, kind: str, dest: str, source: str, rkey: str,
                       args: dict | None) -> None:
        self.bindings.pop(self._key(kind, dest, source, rkey, args), None)

    def forget_exchange(self, name: str) -> None:
        self.exchanges.pop(name, None)
        for key in [k for k in self.bindings if k[2] == name or (k[0] == "exchange"
                                                                    and k[1] == name)]:
            del self.bindings[key]

    def forget_queue(self, name: str) -> None:
        self.queues.pop(name, None)
        for key in [k for k in self.bindings if k[0] == "queue" and k[1] == name]:
            del self.bindings[key]

    async def replay(self, ch: Channel) -> None:
        """Replay everything on ``ch`` (a fresh channel, closed at the end); a declaration the
        broker refuses is logged and skipped (on a new channel), the rest goes on."""
        async def attempt(what: str, method: Any, expect: tuple) -> Any:
            nonlocal ch
            try:
                return await ch._rpc(method, expect, recovering=True)
            except ChannelClosed as exc:
                log.warning("topology recovery: %s failed: %s", what, exc)
                ch = Channel(ch._conn)
                await ch._open()
                return None

        for name, e in self.exchanges.items():
            await attempt(f"exchange {name!r}", cmd.Exchange.Declare(
                0, name, e["exchange_type"], False, e["durable"], e["auto_delete"], e["internal"],
                False, e["arguments"]), (cmd.Exchange.DeclareOk,))
        renamed: dict[str, str] = {}
        for name, q in list(self.queues.items()):
            ok = await attempt(f"queue {name!r}", cmd.Queue.Declare(
                0, q["requested"], False, q["durable"], q["exclusive"], q["auto_delete"], False,
                q["arguments"]), (cmd.Queue.DeclareOk,))
            if ok is not None and ok.queue != name:
                renamed[name] = ok.queue
        for old, new in renamed.items():
            self.queues[new] = self.queues.pop(old)
        self.renamed = renamed
        for key, (kind, dest, source, rkey, args) in list(self.bindings.items()):
            if kind == "queue":
                dest = renamed.get(dest, dest)
                method: Any = cmd.Queue.Bind(0, dest, source, rkey, False, args)
                expect: tuple = (cmd.Queue.BindOk,)
            else:
                method, expect = cmd.Exchange.Bind(0, dest, source, rkey, False, args), (
                    cmd.Exchange.BindOk,)
            if dest != key[1]:
                del self.bindings[key]
                self.add_binding(kind, dest, source, rkey, args)
            await attempt(f"binding {key}", method, expect)
        await ch.close()
