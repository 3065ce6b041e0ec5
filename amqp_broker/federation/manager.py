"""Every federation link of one broker: the ``federation-upstream`` / ``federation-upstream-set``
parameters (kept in ``<data-dir>/federation.json``, written whole and atomically), the links the
policies ask for and their status for ``GET /api/federation-links``.

Every ``RECONCILE_INTERVAL`` seconds the manager compares the links the policies and parameters
ask for (``upstreams.federated`` for each exchange and queue) with those running: a new one is
started, a gone one (policy, parameter, exchange or queue removed) stopped (an exchange link's
upstream queue and exchanges deleted, ``exchange_link.cleanup``), a changed one restarted. Link states, as RabbitMQ's ``rabbit_federation_status``: ``starting``, ``running``
(with ``local_connection``) and ``error`` (with the ``error``; started again after the
upstream's ``reconnect-delay`` seconds). In a cluster the parameters are the metadata log's
(every member's manager follows its applied state, ``follow``; federation.json is the cache) and
one member runs the links: the metadata log's leader (``shovel.manager.runner``, as the
shovels). Source: RabbitMQ "Federation Plugin" (status), rabbit_federation_status (3.10).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ..shovel.link import no_password
from ..shovel.manager import now, reason_of, runner, save_json
from . import exchange_link, queue_link
from .exchange_link import LinkSpec
from .headers import identity
from .params import COMPONENTS, validate
from .upstreams import federated

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from ..core.broker import Broker

__all__ = ["FederationManager", "RECONCILE_INTERVAL", "FILE_NAME"]

log = logging.getLogger(__name__)

#: seconds between comparisons of the wanted links with the running ones
RECONCILE_INTERVAL = 0.5
FILE_NAME = "federation.json"


class _Link:
    """One link's spec, status and the scope of its running task."""

    def __init__(self, spec: LinkSpec) -> None:
        self.spec = spec
        self.status = "starting"
        self.error: str | None = None
        self.local_connection: str | None = None
        self.timestamp = now()
        self.scope = anyio.CancelScope()

    def set(self, status: str, error: str | None = None) -> None:
        self.status, self.error, self.timestamp = status, error, now()

    @property
    def id(self) -> str:
        """A short stable id of the link (RabbitMQ's is a hash of the same key)."""
        s = self.spec
        key = json.dumps([s.vhost, s.kind, s.name, s.upstream.name, s.upstream_name])
        return hashlib.sha1(key.encode()).hexdigest()[:8]


class FederationManager:
    """The federation of ``broker`` (see the module docstring). ``data_dir``: where
    federation.json lives (None: in memory only); ``local``: this broker's AMQP (host, port),
    None until its listener is up (no link starts before)."""

    def __init__(self, broker: Broker, data_dir: str | os.PathLike | None,
                 local: Callable[[], tuple[str, int] | None]) -> None:
        self.broker = broker
        self.path = Path(data_dir) / FILE_NAME if data_dir else None
        self.local = local
        #: (vhost, component, name) -> value
        self.params: dict[tuple[str, str, str], Any] = {}
        self.links: dict[tuple[str, str, str, str], _Link] = {}
        self._tg: TaskGroup | None = None
        if self.path is not None and self.path.exists():
            for item in json.loads(self.path.read_text(encoding="utf-8")):
                self.params[(item["vhost"], item["component"], item["name"])] = item["value"]

    # ------------------------------------------------------------------ parameters
    def _save(self) -> None:
        if self.path is None:
            return
        save_json(self.path, self.parameters())

    def parameters(self, vhost: str | None = None,
                   component: str | None = None) -> list[dict[str, Any]]:
        """The federation parameters (of ``vhost``, of ``component``) as GET /api/parameters
        answers them."""
        return [{"value": v, "vhost": vh, "component": c, "name": n}
                for (vh, c, n), v in sorted(self.params.items())
                if (vhost is None or vh == vhost) and (component is None or c == component)]

    def get(self, vhost: str, component: str, name: str) -> Any:
        """The value of parameter ``name`` of ``component`` in ``vhost``, or None."""
        return self.params.get((vhost, component, name))

    def put(self, vhost: str, component: str, name: str, value: Any) -> bool:
        """Validate and set a parameter (``FederationParamError`` with RabbitMQ's text); True
        when it is new. The links follow at the next reconcile."""
        validate(component, name, value)
        key = (vhost, component, name)
        new = key not in self.params
        self.params[key] = value
        self._save()
        return new

    def follow(self, params: dict[tuple[str, str, str], Any]) -> None:
        """Make the parameters ``params`` ((vhost, component, name) -> value: the cluster
        metadata log's applied state, validated there); the links follow at the next
        reconcile."""
        if params != self.params:
            self.params = dict(params)
            self._save()

    def delete(self, vhost: str, component: str, name: str) -> bool:
        """Clear a parameter; False when there is none."""
        if self.params.pop((vhost, component, name), None) is None:
            return False
        self._save()
        return True

    # ---------------------------------------------------------------------- status
    def status(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """``GET /api/federation-links``: each link's node, exchange / queue, upstream
        exchange / queue (consumer_tag for queues), type, vhost, upstream, id, status
        (``local_connection`` when running, ``error`` when failed), uri and timestamp, in
        RabbitMQ's keys."""
        node = self.broker.settings.node_name
        out = []
        for link in self.links.values():
            s = link.spec
            if vhost is not None and s.vhost != vhost:
                continue
            item: dict[str, Any] = {"node": node}
            if s.kind == "exchange":
                item.update(exchange=s.name, upstream_exchange=s.upstream_name)
            else:
                item.update(queue=s.name, upstream_queue=s.upstream_name,
                            consumer_tag=s.upstream.consumer_tag
                            or f"federation-link-{s.upstream.name}")
            item.update(type=s.kind, vhost=s.vhost, upstream=s.upstream.name, id=link.id,
                        status=link.status)
            if link.status == "running":
                item["local_connection"] = link.local_connection
            elif link.error is not None:
                item["error"] = link.error
            item.update(uri=no_password(s.upstream.uris[0]), timestamp=link.timestamp)
            out.append(item)
        return out

    def restart(self, link_id: str) -> bool:
        """Stop link ``link_id`` (started again at the next reconcile); False when unknown."""
        for key, link in list(self.links.items()):
            if link.id == link_id:
                link.scope.cancel()
                del self.links[key]
                return True
        return False

    # ---------------------------------------------------------------------- running
    def runs_here(self) -> bool:
        """True when this member runs the links (``shovel.manager.runner``): alone, or the
        metadata log's leader."""
        return runner(self.broker) == self.broker.settings.node_name

    def wanted(self) -> dict[tuple[str, str, str, str], LinkSpec]:
        """The links the policies and parameters ask for now, by (vhost, kind, name,
        upstream)."""
        me = identity(self.broker.cluster_properties, self.broker.settings.node_name)
        policies = self.broker.policies
        out: dict[tuple[str, str, str, str], LinkSpec] = {}
        for vhost, vh in list(self.broker.vhosts.items()):
            params = {(c, n): v for (h, c, n), v in self.params.items() if h == vhost}
            if not params or not any(k in p.definition for p in policies.list(vhost)
                                     for k in COMPONENTS):
                continue
            objects = [("exchange", x.name, x.arguments) for x in vh.routing.exchanges()]
            objects += [("queue", q.name, q.arguments) for q in list(vh.queues.values())]
            for kind, name, args in objects:
                for u in federated(policies, vhost, kind, name, args, params):
                    out[(vhost, kind, name, u.name)] = LinkSpec(vhost, kind, name, u, me)
        return out

    def reconcile(self) -> None:
        """Start, stop and restart links to match ``wanted`` (nothing runs on a member that
        does not run the links, or before the AMQP listener is up); forget the parameters of
        deleted vhosts (as RabbitMQ deletes a vhost's runtime parameters with it)."""
        if self._tg is None:
            return
        if self.local() is not None:   # definitions loaded: a deleted vhost's parameters go
            gone = [k for k in self.params if k[0] not in self.broker.vhosts]
            for param in gone:
                del self.params[param]
            if gone:
                self._save()
        wanted = self.wanted() if self.runs_here() and self.local() is not None else {}
        for key, link in list(self.links.items()):
            if wanted.get(key) != link.spec:
                link.scope.cancel()
                del self.links[key]
                s = link.spec
                local = self.local()
                if key not in wanted and s.kind == "exchange" and s.upstream.cleanup \
                        and self.runs_here() and local is not None:
                    self._tg.start_soon(self._cleanup, s, local)
        for key, spec in wanted.items():
            if key not in self.links:
                link = self.links[key] = _Link(spec)
                self._tg.start_soon(self._supervise, link)

    async def run(self, tg: TaskGroup) -> None:
        """Run the links in ``tg``, reconciling every ``RECONCILE_INTERVAL`` seconds until
        cancelled."""
        self._tg = tg
        while True:
            try:
                self.reconcile()
            except Exception:   # a policy or object changing under us: try again next time
                log.exception("federation: reconcile failed")
            await anyio.sleep(RECONCILE_INTERVAL)

    async def _cleanup(self, spec: LinkSpec, local: tuple[str, int]) -> None:
        try:
            await exchange_link.cleanup(spec, local)
        except Exception as exc:  # the upstream is away: its queue stays (as RabbitMQ's)
            log.warning("federation link exchange %r of vhost %r from upstream %r: cleanup "
                        "failed: %s", spec.name, spec.vhost, spec.upstream.name, reason_of(exc))

    async def _supervise(self, link: _Link) -> None:
        s = link.spec
        runner = exchange_link.run if s.kind == "exchange" else queue_link.run

        def running(conn: str) -> None:
            link.local_connection = conn
            link.set("running")

        with link.scope:
            while True:
                link.set("starting")
                local = self.local()
                try:
                    if local is None:
                        raise exchange_link.LinkFailed("the AMQP listener is not up")
                    await runner(s, self.broker, local, running)
                except Exception as exc:  # an end failed: RabbitMQ shows it as error
                    reason = reason_of(exc)
                    log.warning("federation link %s %r of vhost %r from upstream %r: %s",
                                s.kind, s.name, s.vhost, s.upstream.name, reason)
                    link.set("error", reason)
                await anyio.sleep(max(s.upstream.reconnect_delay, 0.1))
