"""``amqp-broker ctl``'s HTTP client: the management API of the first cluster member that answers,
among the URLs it was given and the members it learnt from an earlier answer.

Choosing a member (``Api``): the given URLs in order, then the remembered ones. A member that
cannot be reached is skipped: connection refused, no route, a connect that takes longer than
``connect_timeout`` seconds, a TLS handshake that fails, or (for a GET, which changes nothing)
no answer within ``timeout`` seconds. An HTTP answer, error or not, is an answer: the command
gets it and no other member is tried. A request that changes something (PUT, POST, DELETE) is
never sent to a second member once a first one accepted the connection (it may have applied
it). Once a member answered, the rest of the command's requests go to it.

Learning members (``learn``, ``MemberCache``): after a member answered, its ``/api/overview``
lists every cluster member's listeners with their node names (``management.peers``, RabbitMQ's
``listeners``); the management ones (protocol ``http``/``https``) of the other nodes, and the
answering one when it was itself a remembered member, are kept with their node names in
``$XDG_CACHE_HOME/amqp-broker/ctl-members.json`` (default ``~/.cache``), under the given URL
list. The next call with that URL list tries them after the given URLs; before a remembered
member is used, its ``/api/overview`` must name the node it had (so a port reused by another
broker is not taken for the member). A member the answering one no longer has in its view is
forgotten. The file keeps the ``MAX_KEYS`` URL lists used last; it is written atomically, and
a cache that cannot be read or written is ignored.

A client only: the standard library (``http.client``), nothing of the broker imported.
Source: rabbitmqctl(8) (``--node``), RabbitMQ "Management HTTP API" (``/api/overview``).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Api", "ApiError", "MemberCache", "parse_urls", "learn", "cache_path",
           "DEFAULT_URL", "MAX_KEYS"]

DEFAULT_URL = "http://127.0.0.1:15672"
#: URL lists the member cache remembers (the least recently used go first)
MAX_KEYS = 64
_WILDCARDS = {"", "0.0.0.0", "::", "[::]"}


class ApiError(Exception):
    """The API answered with an error (``status``, ``reason``; ``body``: its decoded JSON, None
    when it had none), or no member could be reached (``status`` 0)."""

    def __init__(self, status: int, reason: str, body: Any = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.body = body


class _Unreachable(Exception):
    """This member did not answer; try the next one."""


def parse_urls(values: list[str]) -> list[str]:
    """Each value may hold several comma-separated URLs; -> the URLs in order, without a
    trailing slash, each once. Raises ``ValueError`` for a scheme other than http/https or a
    URL without a host."""
    out: list[str] = []
    for value in values:
        for url in (u.strip().rstrip("/") for u in value.split(",")):
            if not url:
                continue
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{url!r}: not an http:// or https:// URL with a host")
            if url not in out:
                out.append(url)
    return out


def cache_path() -> Path:
    """``$XDG_CACHE_HOME/amqp-broker/ctl-members.json`` (``~/.cache`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "amqp-broker" / "ctl-members.json"


class MemberCache:
    """The remembered members per URL list: ``{key: {"members": [{"url", "node"}], "at": s}}``
    in ``path`` (JSON)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_path()

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> list[tuple[str, str]]:
        """The (url, node name) pairs remembered for ``key``, in order ([] when none)."""
        entry = self._load().get(key)
        members = entry.get("members") if isinstance(entry, dict) else None
        return [(m["url"], m["node"]) for m in members or []
                if isinstance(m, dict) and isinstance(m.get("url"), str)
                and isinstance(m.get("node"), str)]

    def put(self, key: str, members: list[tuple[str, str]]) -> None:
        """Remember ``members`` (url, node name) for ``key``; errors are ignored."""
        data = self._load()
        data[key] = {"members": [{"url": u, "node": n} for u, n in members], "at": time.time()}
        if len(data) > MAX_KEYS:
            keep = sorted(data, key=lambda k: data[k].get("at", 0) if isinstance(data[k], dict)
                          else 0)[-MAX_KEYS:]
            data = {k: data[k] for k in keep}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".ctl-members.")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
            os.replace(tmp, self.path)
        except OSError:
            pass


class Api:
    """A small management API client (basic auth, JSON in and out) over one or more members:
    ``url`` (one URL, or a list of them), then ``fallback`` ((url, node name) pairs learnt
    earlier). ``timeout``: seconds to wait for an answer; ``connect_timeout``: for a connection
    and, while no member has answered yet, for a GET's answer. After a request, ``url`` is the
    member that answered and ``skipped`` the (url, why) of those that did not before it."""

    def __init__(self, url: str | list[str], user: str, password: str, timeout: float = 30.0,
                 connect_timeout: float = 10.0,
                 fallback: list[tuple[str, str]] | None = None) -> None:
        self.given = parse_urls([url] if isinstance(url, str) else url) or [DEFAULT_URL]
        self.fallback = [(u, n) for u, n in fallback or [] if u not in self.given]
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}
        self.url: str | None = None
        self.node: str | None = None   # the remembered node name of ``url``, when it was one
        self.overview: Any = None       # its /api/overview, when read to check the node
        self.skipped: list[tuple[str, str]] = []

    def _send(self, base: str, method: str, path: str, data: bytes | None,
              headers: dict[str, str], choosing: bool) -> tuple[int, str, bytes]:
        parts = urlsplit(base)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname or "", parts.port, timeout=self.connect_timeout)
        try:
            try:
                conn.connect()
            except OSError as exc:   # refused, unreachable, timed out, TLS handshake failed
                raise _Unreachable(str(exc) or type(exc).__name__) from None
            wait = self.connect_timeout if choosing and method == "GET" else self.timeout
            assert conn.sock is not None
            conn.sock.settimeout(wait)
            try:
                conn.request(method, parts.path + "/api" + path, body=data, headers=headers)
                resp = conn.getresponse()
                return resp.status, resp.reason, resp.read()
            except (OSError, http.client.HTTPException) as exc:
                why = (f"no answer within {wait:g} s" if isinstance(exc, TimeoutError)
                       else str(exc) or type(exc).__name__)
                if choosing and method == "GET":
                    raise _Unreachable(why) from None
                raise ApiError(0, f"{base}: {why}") from None
        finally:
            conn.close()

    def _answer(self, status: int, reason: str, raw: bytes) -> Any:
        if 200 <= status < 300:
            return json.loads(raw) if raw.strip() else None
        body = None
        try:
            body = json.loads(raw)
            reason = body.get("reason", reason)
        except (ValueError, AttributeError):
            pass
        raise ApiError(status, str(reason), body)

    def _choose(self, method: str, path: str, data: bytes | None,
                headers: dict[str, str]) -> Any:
        candidates = [(u, None) for u in self.given] + list(self.fallback)
        for base, node in candidates:
            try:
                if node is not None:   # a remembered member: is it still that node?
                    status, reason, raw = self._send(base, "GET", "/overview", None,
                                                     self.headers, True)
                    if 200 <= status < 300:
                        overview = json.loads(raw) if raw.strip() else {}
                        seen = overview.get("node") if isinstance(overview, dict) else None
                        if seen != node:
                            self.skipped.append((base, f"is node {seen}, not {node}"))
                            continue
                        self.overview = overview
                got = self._send(base, method, path, data, headers, True)
            except _Unreachable as exc:
                self.skipped.append((base, str(exc)))
                continue
            self.url, self.node = base, node
            return self._answer(*got)
        tried = "; ".join(f"{u}: {why}" for u, why in self.skipped)
        raise ApiError(0, f"unable to connect to any member ({tried})")

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> Any:
        """``method`` ``/api`` + ``path`` on the chosen member (chosen by the first request);
        the decoded JSON answer (None when empty). Raises ``ApiError`` (status 0 when no member
        answers)."""
        data = None if body is None else json.dumps(body).encode()
        hdrs = {**self.headers, **(headers or {})}
        if self.url is None:
            return self._choose(method, path, data, hdrs)
        try:
            return self._answer(*self._send(self.url, method, path, data, hdrs, False))
        except _Unreachable as exc:
            raise ApiError(0, f"{self.url}: {exc}") from None


def _url(scheme: str, host: str, port: int, prefix: str) -> str:
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}{prefix}"


def learn(api: Api) -> list[tuple[str, str]]:
    """The members to remember after ``api`` got an answer: (management URL, node name) of the
    other nodes in the answering member's ``/api/overview`` listeners, after the answering one
    itself when it was a remembered member. Raises ``ApiError``."""
    assert api.url is not None
    overview = api.overview if api.overview is not None else api.request("GET", "/overview")
    parts = urlsplit(api.url)
    me = overview.get("node")
    out: list[tuple[str, str]] = []
    if api.node is not None:
        out.append((api.url, api.node))
    for x in overview.get("listeners") or []:
        if not isinstance(x, dict) or x.get("protocol") not in ("http", "https"):
            continue
        node, host, port = x.get("node"), str(x.get("ip_address") or ""), x.get("port")
        if node == me or not isinstance(node, str) or not isinstance(port, int):
            continue
        if host in _WILDCARDS:   # bound to every address: its node name's host part
            host = node.partition("@")[2]
            if not host:
                continue
        url = _url(x["protocol"], host, port, parts.path)
        if url not in api.given and all(url != u for u, _ in out):
            out.append((url, node))
    return out
