"""Every dynamic shovel of one broker: the ``shovel`` parameters (validated ``ShovelDef``s),
kept in ``<data-dir>/parameters.json`` (written whole, atomically: temporary file, fsync,
rename), their states for ``GET /api/shovels``, and the tasks running them.

States, as RabbitMQ's ``rabbit_shovel_status``: ``starting`` (connecting, declaring),
``running`` (with its ends: src_uri, src_queue / src_exchange + src_exchange_key, dest_uri,
dest_queue / dest_exchange + dest_exchange_key, protocols ``amqp091``), ``terminated`` with the
``reason`` (an end failed: started again after ``reconnect-delay`` seconds, or never when it
is 0). A shovel that reached ``src-delete-after`` is deleted with its parameter (RabbitMQ's
"autodelete"; in a cluster by a ``ClearParameter`` through the metadata log).

In a cluster the parameters are the cluster metadata log's (issue 23): the management API
proposes each change (``SetParameter`` / ``ClearParameter``) and every member's manager follows
the applied state (``follow``), parameters.json being its cache. One member runs every shovel
(``runner``): the metadata log's leader, once it follows the log. Raft elects at most one leader
per term and check-quorum makes a leader cut off from the majority step down, so two members
run a shovel at once only for the moments of a leader change (the old leader stops at its next
placement check, every ``PLACEMENT_INTERVAL`` seconds, the new one starts at its own); when the
leader dies the next elected one takes the shovels over (from what the source has not yet had
acked: at least once). RabbitMQ runs each dynamic shovel on one node and restarts it on another
when that node dies ("Dynamic Shovels", 3.10; "Metadata store": the store decides).
Source: RabbitMQ "Dynamic Shovels", "Shovel plugin" (status), 3.10.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from cluster.metadata.commands import ClearParameter

from . import link
from .params import ShovelDef, ShovelParamError, validate

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ..core.broker import Broker

__all__ = ["ShovelManager", "PLACEMENT_INTERVAL", "FILE_NAME", "now", "reason_of",
           "save_json", "runner"]

log = logging.getLogger(__name__)

#: seconds between checks of which member runs the shovels
PLACEMENT_INTERVAL = 1.0
FILE_NAME = "parameters.json"


def now() -> str:
    """Local time as RabbitMQ's status timestamps show it ("YYYY-MM-DD HH:MM:SS")."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())


def save_json(path: Path, items: list[dict[str, Any]]) -> None:
    """Write ``items`` as JSON to ``path`` whole and atomically (temporary file, fsync,
    rename). Raises ``OSError``."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(items, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def runner(broker: Broker) -> str | None:
    """The member that runs the shovels and federation links: this broker alone; in a cluster
    the metadata log's leader as this member knows it, once this member follows the log (None:
    no leader known here, e.g. cut off from the majority, or not caught up yet)."""
    metadata = broker.metadata
    if metadata is None:
        return str(broker.settings.node_name)
    status = metadata.status()
    leader = status.get("leader") if status.get("ready") else None
    return str(leader) if leader else None


class _Shovel:
    """One shovel's definition, state and the scope of its running task."""

    def __init__(self, d: ShovelDef) -> None:
        self.d = d
        self.state = "starting"
        self.reason: str | None = None
        self.timestamp = now()
        self.scope: anyio.CancelScope | None = None
        self.completed = False   # reached src-delete-after; its clear is on its way (cluster)

    def set(self, state: str, reason: str | None = None) -> None:
        self.state, self.reason, self.timestamp = state, reason, now()


class ShovelManager:
    """The shovels of ``broker`` (see module docstring). ``data_dir``: where parameters.json
    lives (None: kept in memory only); ``local``: returns this broker's AMQP (host, port), None
    until its listener is up (no shovel starts before)."""

    def __init__(self, broker: Broker, data_dir: str | os.PathLike | None,
                 local: Callable[[], tuple[str, int] | None]) -> None:
        self.broker = broker
        self.path = Path(data_dir) / FILE_NAME if data_dir else None
        self.local = local
        self.shovels: dict[tuple[str, str], _Shovel] = {}
        self._tg: TaskGroup | None = None
        self._load()

    # ------------------------------------------------------------------ parameters
    def _load(self) -> None:
        if self.path is None or not self.path.exists():
            return
        for item in json.loads(self.path.read_text(encoding="utf-8")):
            if item.get("component") != "shovel":
                continue
            try:
                d = validate(item["vhost"], item["name"], item["value"])
            except ShovelParamError as exc:
                log.warning("stored shovel %r skipped: %s", item.get("name"), exc)
                continue
            self.shovels[(d.vhost, d.name)] = _Shovel(d)

    def _save(self) -> None:
        if self.path is None:
            return
        save_json(self.path, [{"component": "shovel", "vhost": s.d.vhost, "name": s.d.name,
                               "value": s.d.value} for s in self.shovels.values()])

    def parameters(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """The ``shovel`` parameters (of ``vhost``) as GET /api/parameters answers them."""
        return [{"value": s.d.value, "vhost": s.d.vhost, "component": "shovel",
                 "name": s.d.name} for s in self.shovels.values()
                if vhost is None or s.d.vhost == vhost]

    def get(self, vhost: str, name: str) -> ShovelDef | None:
        """The definition of shovel ``name`` of ``vhost``, or None."""
        s = self.shovels.get((vhost, name))
        return s.d if s else None

    def _forget(self, vhost: str, name: str) -> bool:
        """Stop shovel ``name`` of ``vhost`` and drop it (not saved); False when unknown."""
        s = self.shovels.pop((vhost, name), None)
        if s is not None and s.scope is not None:
            s.scope.cancel()
        return s is not None

    def put(self, d: ShovelDef) -> bool:
        """Add or replace shovel ``d`` (and start it when this member runs shovels); True
        when it is new."""
        new = not self._forget(d.vhost, d.name)
        self.shovels[(d.vhost, d.name)] = _Shovel(d)
        self._save()
        self._place()
        return new

    def delete(self, vhost: str, name: str) -> bool:
        """Stop and forget shovel ``name`` of ``vhost``; False when there is none."""
        if not self._forget(vhost, name):
            return False
        self._save()
        return True

    def follow(self, values: dict[tuple[str, str], Any]) -> None:
        """Make the shovels those of ``values`` ((vhost, name) -> the parameter's value: the
        cluster metadata log's applied state): the others stopped and forgotten, new and
        changed ones (re)started where this member runs shovels, unchanged ones left running.
        A value that does not validate here is logged and skipped (the log validated it)."""
        changed = False
        for vhost, name in [k for k in self.shovels if k not in values]:
            changed |= self._forget(vhost, name)
        for (vhost, name), value in values.items():
            s = self.shovels.get((vhost, name))
            if s is not None and s.d.value == value:
                continue
            try:
                d = validate(vhost, name, value)
            except ShovelParamError as exc:
                log.warning("shovel %r of vhost %r skipped: %s", name, vhost, exc)
                continue
            self._forget(vhost, name)
            self.shovels[(vhost, name)] = _Shovel(d)
            changed = True
        if changed:
            self._save()
            self._place()

    def delete_vhost(self, vhost: str) -> None:
        """Forget every shovel of ``vhost`` (deleted)."""
        for v, n in list(self.shovels):
            if v == vhost:
                self.delete(v, n)

    def restart(self, vhost: str, name: str) -> bool:
        """Stop and start shovel ``name`` again; False when there is none."""
        s = self.shovels.get((vhost, name))
        if s is None:
            return False
        if s.scope is not None:
            s.scope.cancel()
            s.scope = None
        s.set("starting")
        self._place()
        return True

    # ------------------------------------------------------------------- status
    def status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """``GET /api/shovels``: each shovel's node, timestamp, name, vhost, type, state and,
        running, its ends (terminated: ``reason``), as RabbitMQ's shovel management."""
        node = self.broker.settings.node_name
        out = []
        for s in self.shovels.values():
            d = s.d
            if vhost is not None and d.vhost != vhost:
                continue
            item: dict[str, Any] = {"node": node, "timestamp": s.timestamp, "name": d.name,
                                    "vhost": d.vhost, "type": "dynamic", "state": s.state}
            if s.state == "running":
                item.update(_ends(d))
            elif s.state == "terminated":
                item["reason"] = s.reason
            out.append(item)
        return out

    # ------------------------------------------------------------------- running
    def runs_here(self) -> bool:
        """True when this member runs the shovels (``runner``): alone, or the metadata
        log's leader."""
        return runner(self.broker) == self.broker.settings.node_name

    def _place(self) -> None:
        if self._tg is None or self.local() is None:
            return
        who = runner(self.broker)
        here = who == self.broker.settings.node_name
        elsewhere = f"run by member {who}, the cluster metadata leader" if who else \
            "no cluster metadata leader known here: run by none of this side"
        for s in list(self.shovels.values()):
            if s.d.vhost not in self.broker.vhosts:   # its vhost was deleted: so is it
                self.delete(s.d.vhost, s.d.name)
            elif here and s.scope is None and not s.completed:
                s.scope = anyio.CancelScope()
                self._tg.start_soon(self._supervise, s, s.scope)
            elif not here and not s.completed and (s.scope is not None
                                                   or s.reason != elsewhere):
                if s.scope is not None:
                    s.scope.cancel()
                    s.scope = None
                s.set("terminated", elsewhere)

    async def run(self, tg: TaskGroup) -> None:
        """Start the shovels this member runs in ``tg`` and re-check the placement every
        ``PLACEMENT_INTERVAL`` seconds until cancelled."""
        self._tg = tg
        while True:
            self._place()
            await anyio.sleep(PLACEMENT_INTERVAL)

    async def _supervise(self, s: _Shovel, scope: anyio.CancelScope) -> None:
        with scope:
            while self.shovels.get((s.d.vhost, s.d.name)) is s:
                s.set("starting")
                try:
                    local = self.local()
                    assert local is not None   # _place starts shovels once it is known
                    outcome = await link.run(s.d, local, self.broker.settings.node_name,
                                             lambda: s.set("running"))
                except Exception as exc:  # an end failed: RabbitMQ shows it as terminated
                    reason = reason_of(exc)
                    log.warning("shovel %r of vhost %r terminated: %s", s.d.name, s.d.vhost,
                                reason)
                    s.set("terminated", reason)
                    if s.d.reconnect_delay <= 0:
                        break
                    await anyio.sleep(s.d.reconnect_delay)
                    continue
                if outcome == "completed":
                    log.info("shovel %r of vhost %r completed its src-delete-after: deleted",
                             s.d.name, s.d.vhost)
                    self._completed(s)
                    break
        if s.scope is scope:
            s.scope = None


    def _completed(self, s: _Shovel) -> None:
        """Shovel ``s`` reached its ``src-delete-after``: its parameter is cleared (in a
        cluster through the metadata log, so that no member starts it again; until that
        applies here it stays, not started again)."""
        metadata = self.broker.metadata
        if metadata is None:
            self.delete(s.d.vhost, s.d.name)
            return
        s.completed = True
        s.set("terminated", "completed its src-delete-after")
        metadata.propose(ClearParameter("shovel", s.d.vhost, s.d.name))


def reason_of(exc: BaseException) -> str:
    """``exc`` as a status's reason ("Type: text"; a group of one: its exception)."""
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return reason_of(exc.exceptions[0])
    return f"{type(exc).__name__}: {exc}"


def _ends(d: ShovelDef) -> dict[str, Any]:
    out: dict[str, Any] = {"src_uri": link.no_password(d.src_uris[0]), "src_protocol": "amqp091",
                           "dest_protocol": "amqp091",
                           "dest_uri": link.no_password(d.dest_uris[0])}
    if d.src_queue is not None:
        out["src_queue"] = d.src_queue
    else:
        out["src_exchange"] = d.src_exchange
        out["src_exchange_key"] = d.value.get("src-exchange-key", "")
    if d.dest_queue is not None:
        out["dest_queue"] = d.dest_queue
    elif d.dest_exchange is not None:
        out["dest_exchange"] = d.dest_exchange
        if d.dest_exchange_key is not None:
            out["dest_exchange_key"] = d.dest_exchange_key
    return out
