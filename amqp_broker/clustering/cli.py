"""``amqp-broker cluster-status``: ask brokers for their cluster view, print it as JSON.

    amqp-broker cluster-status [--uri amqp://HOST:PORT/ ...] [--timeout S] [--wait S]

Each broker is asked the way any client could: open a TCP connection, send the AMQP 0-9-1
protocol header, read the Connection.Start method (pamqp decodes it) and close. Its server
properties carry the node's view of the cluster (``amqp_broker.clustering`` and the cluster
driver keep them current): ``node_name``, ``cluster_name``, ``cluster_view`` (the view number,
only grows), ``cluster_members`` (``host:port`` of each member, the leader first) and
``cluster_member_names``; and its HTTP listeners (``amqp_broker.management.peers``):
``management_port``, ``management_protocol`` ("http"/"https") and ``prometheus_port`` (0 when
off, null from a broker that does not say). No login happens, so credentials in a URI are
ignored and never printed.

Output (stdout, one JSON object)::

    {"brokers": [{"address": "127.0.0.2:5672", "reachable": true, "node_name": "n2",
                  "cluster_name": "blue", "clustered": true, "cluster_view": 65537,
                  "leader": "n2", "cluster_members": [...], "cluster_member_names": [...],
                  "management_port": 15672, "management_protocol": "http",
                  "prometheus_port": 15692},
                 {"address": "127.0.0.9:5672", "reachable": false, "error": "..."}],
     "agree": true}

``agree``: every reachable broker reports the same view number and members. ``--wait S`` asks
again every 0.5 s, for up to S seconds, until every broker answers, they agree and their view has at least as
many members as were asked (a cluster just started: its members are still joining); it
prints the last answer either way. Exit codes: 0 every broker answered, 1 at least one did not
(connection refused, timeout, not AMQP 0-9-1), 2 usage.
Must not know: the broker's internals (this is a client; it runs without a broker in-process).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from pamqp import commands, frame

__all__ = ["PROTOCOL_HEADER", "server_properties", "broker_status", "parse_uri", "main",
           "build_parser"]

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
DEFAULT_URI = "amqp://127.0.0.1:5672/"
_FRAME_HEADER = struct.Struct(">BHI")
_MAX_START_FRAME = 1 << 20   # a Connection.Start larger than this is not one


def parse_uri(uri: str) -> tuple[str, int]:
    """``amqp://[user:pass@]host[:port][/vhost]`` -> ``(host, port)`` (port 5672 by default;
    ``[v6]`` hosts allowed). Raises ``ValueError`` for another scheme or no host."""
    parts = urlsplit(uri)
    if parts.scheme != "amqp":
        raise ValueError(f"{uri!r}: only amqp:// URIs are supported")
    try:
        port = parts.port or 5672
    except ValueError:
        raise ValueError(f"{uri!r}: bad port") from None
    if not parts.hostname:
        raise ValueError(f"{uri!r}: no host")
    return parts.hostname, port


def _recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    data = b""
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out waiting for Connection.Start")
        sock.settimeout(left)
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("connection closed before Connection.Start")
        data += chunk
    return data


def server_properties(host: str, port: int, timeout: float = 3.0) -> dict[str, Any]:
    """The Connection.Start server properties of the AMQP 0-9-1 broker at ``host:port``.

    Raises ``OSError`` (refused, reset, ``TimeoutError``) when it does not answer in ``timeout``
    seconds, ``ConnectionError`` when the peer is not an AMQP 0-9-1 broker (it answers with
    another protocol header, or a first frame that is not Connection.Start)."""
    deadline = time.monotonic() + timeout
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(PROTOCOL_HEADER)
        head = _recv_exact(sock, _FRAME_HEADER.size, deadline)
        if head[:4] == b"AMQP":   # spec §4.2.2: the protocol header it supports instead
            rest = _recv_exact(sock, 1, deadline)
            raise ConnectionError(f"{host}:{port} speaks another AMQP version: "
                                  f"{(head + rest)!r}")
        kind, channel, size = _FRAME_HEADER.unpack(head)
        if kind != 1 or channel != 0 or size > _MAX_START_FRAME:
            raise ConnectionError(f"{host}:{port} did not send a Connection.Start frame")
        data = head + _recv_exact(sock, size + 1, deadline)
    try:
        _, _, method = frame.unmarshal(data)
    except Exception as exc:   # pamqp raises UnmarshalingException, or ValueError (DESIGN §5)
        raise ConnectionError(f"{host}:{port} sent an undecodable first frame: {exc}") from None
    if not isinstance(method, commands.Connection.Start):
        raise ConnectionError(f"{host}:{port} sent {type(method).__name__}, not "
                              "Connection.Start")
    return dict(method.server_properties or {})


def _text(value: Any) -> Any:
    """Field-table strings may arrive as bytes; JSON wants text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list | tuple):
        return [_text(v) for v in value]
    return value


def broker_status(uri: str, timeout: float = 3.0) -> dict[str, Any]:
    """One broker's cluster view as a JSON-ready dict (see the module docstring); an unreachable
    broker gives ``{"address", "reachable": False, "error"}``. Raises ``ValueError`` for a bad
    URI."""
    host, port = parse_uri(uri)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        props = server_properties(host, port, timeout)
    except OSError as exc:
        return {"address": address, "reachable": False,
                "error": str(exc) or type(exc).__name__}
    members = _text(props.get("cluster_members") or [])
    names = _text(props.get("cluster_member_names") or [])
    view = props.get("cluster_view")
    return {
        "address": address,
        "reachable": True,
        "node_name": _text(props.get("node_name")),
        "version": _text(props.get("version")),
        "cluster_name": _text(props.get("cluster_name")),
        "clustered": view is not None,
        "cluster_view": view,
        "in_view": bool(view) and address in members,
        "leader": names[0] if names else None,
        "cluster_members": members,
        "cluster_member_names": names,
        "management_port": props.get("management_port"),
        "management_protocol": _text(props.get("management_protocol")),
        "prometheus_port": props.get("prometheus_port"),
    }


def _agree(statuses: list[dict[str, Any]]) -> bool:
    views = {(s["cluster_view"], tuple(s["cluster_members"]))
             for s in statuses if s["reachable"]}
    return len(views) <= 1


def build_parser() -> argparse.ArgumentParser:
    """The ``cluster-status`` argument parser."""
    p = argparse.ArgumentParser(
        prog="amqp-broker cluster-status",
        description="Print each broker's view of its cluster (from its Connection.Start server "
                    "properties) as JSON. Exit 1 when a broker does not answer.")
    p.add_argument("--uri", action="append", default=[], metavar="amqp://HOST:PORT/",
                   help=f"a broker to ask (repeatable; default {DEFAULT_URI})")
    p.add_argument("--timeout", type=float, default=3.0,
                   help="seconds to wait for each broker (default 3)")
    p.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                   help="ask again for up to SECONDS until every broker answers and all agree "
                   "on a view listing every one of them (default 0: ask once)")
    return p


def _formed(statuses: list[dict[str, Any]]) -> bool:
    """Every broker answered, they agree, and their view has at least as many members as were
    asked (addresses are not compared: a broker may be asked by another name than it announces);
    a single broker that is not clustered is formed as it is (else ``--wait`` waited it out)."""
    if not statuses or not all(s["reachable"] for s in statuses) or not _agree(statuses):
        return False
    if len(statuses) == 1 and not statuses[0].get("clustered"):
        return True
    return len(statuses[0].get("cluster_members") or []) >= len(statuses)


def main(argv: list[str] | None = None) -> int:
    """Run ``cluster-status``; returns the exit code (0 all answered, 1 one did not, 2 usage)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    uris = args.uri or [DEFAULT_URI]
    try:
        for uri in uris:
            parse_uri(uri)
    except ValueError as exc:
        parser.error(str(exc))
    deadline = time.monotonic() + max(args.wait, 0.0)
    statuses = [broker_status(uri, args.timeout) for uri in uris]
    while args.wait > 0 and not _formed(statuses) and time.monotonic() < deadline:
        time.sleep(0.5)
        statuses = [broker_status(uri, args.timeout) for uri in uris]
    json.dump({"brokers": statuses, "agree": _agree(statuses)}, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if all(s["reachable"] for s in statuses) else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
