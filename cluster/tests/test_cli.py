"""The operator commands, run as subprocesses the way an operator would: ``amqp-broker --help``
(run flags plus the subcommands in its epilog), ``amqp-broker cluster-ca init/issue`` (files that
``cluster.ca`` loads into mutual-TLS contexts, checked with a real handshake over a socketpair), and
``amqp-broker cluster-status`` against a two-broker cluster on 127.0.0.2/3 (DESIGN.md §6)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import ca
from cluster.tests.processes import Cluster, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(60)


def amqp_broker(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run ``python -m amqp_broker ARGS`` (what the ``amqp-broker`` script runs)."""
    return subprocess.run([sys.executable, "-m", "amqp_broker", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_help_lists_run_flags_and_subcommands() -> None:
    out = amqp_broker("--help")
    assert out.returncode == 0, out.stderr
    for flag in ("--host", "--port", "--data-dir", "--cluster", "--seed", "--cluster-secret",
                 "--sync-replies", "--ping-interval", "--node-name"):
        assert flag in out.stdout
    subcommands = out.stdout.split("subcommands", 1)[1]
    for sub in ("ctl", "cluster-status", "cluster-ca", "help"):
        assert f"\n  {sub} " in subcommands
    ca = amqp_broker("help", "cluster-ca")
    assert ca.returncode == 0 and "init" in ca.stdout and "issue" in ca.stdout


def test_unknown_command_and_bad_flag_are_usage_errors() -> None:
    out = amqp_broker("cluster-stats")
    assert out.returncode == 2 and "unknown command 'cluster-stats'" in out.stderr
    assert amqp_broker("--no-such-flag").returncode == 2
    out = amqp_broker("cluster-status", "--uri", "http://127.0.0.1:5672/")
    assert out.returncode == 2 and "only amqp://" in out.stderr


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext,
               server_hostname: str) -> str | None:
    """A TLS handshake over a socketpair (no network); returns the client's name as the server's
    certificate check saw it."""
    left, right = socket.socketpair()
    left.settimeout(5)
    right.settimeout(5)
    seen: list[str | None] = []

    def serve() -> None:
        with server_ctx.wrap_socket(left, server_side=True) as tls:
            seen.append(ca.peer_node_name(tls.getpeercert()))
            tls.sendall(tls.recv(10))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    with client_ctx.wrap_socket(right, server_hostname=server_hostname) as tls:
        tls.sendall(b"ping")
        assert tls.recv(10) == b"ping"
    thread.join(5)
    return seen[0]


def test_cluster_ca_init_and_issue_make_usable_mtls_files(tmp_path: Path) -> None:
    d = tmp_path / "ca"
    out = amqp_broker("cluster-ca", "init", "--dir", str(d))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(d / "ca.crt"), str(d / "ca.key")]
    for node, host in (("n2", "127.0.0.2"), ("n3", "127.0.0.3")):
        out = amqp_broker("cluster-ca", "issue", node, "--dir", str(d), "--host", host)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [str(d / f"{node}.crt"), str(d / f"{node}.key")]
        assert (d / f"{node}.key").stat().st_mode & 0o777 == 0o600
    again = amqp_broker("cluster-ca", "issue", "n2", "--dir", str(d))
    assert again.returncode == 1 and "exists" in again.stderr   # never overwrites a key
    server = ca.server_ssl_context(d, "n2")
    client = ca.client_ssl_context(d, "n3")
    assert _handshake(server, client, "127.0.0.2") == "n3"   # verified by its IP SAN
    missing = amqp_broker("cluster-ca", "issue", "n4", "--dir", str(tmp_path / "nope"))
    assert missing.returncode == 1


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path)
    try:
        yield c
    finally:
        c.stop_all()


def test_cluster_status_shows_both_members_in_order(cluster: Cluster) -> None:
    n2 = cluster.start(2)
    n3 = cluster.start(3, n2)
    expected = [n2.address, n3.address]
    wait_for(lambda: n2.members() == expected and n3.members() == expected, 15,
             "no view of two")
    out = amqp_broker("cluster-status", "--uri", f"amqp://{n2.host}:{n2.port}/",
                      "--uri", f"amqp://guest:guest@{n3.host}:{n3.port}/%2F")
    assert out.returncode == 0, out.stderr
    assert "guest" not in out.stdout                      # credentials are never printed
    status = json.loads(out.stdout)
    assert status["agree"] is True
    assert [b["node_name"] for b in status["brokers"]] == ["n2", "n3"]
    for broker in status["brokers"]:
        assert broker["reachable"] and broker["in_view"] and broker["clustered"]
        assert broker["cluster_members"] == expected        # the leader first
        assert broker["cluster_member_names"] == ["n2", "n3"]
        assert broker["leader"] == "n2"
        assert broker["cluster_view"] > 0
    assert status["brokers"][0]["cluster_view"] == status["brokers"][1]["cluster_view"]

    dead = free_port("127.0.0.4")
    out = amqp_broker("cluster-status", "--uri", f"amqp://{n3.host}:{n3.port}/",
                      "--uri", f"amqp://127.0.0.4:{dead}/", "--timeout", "1")
    assert out.returncode == 1
    status = json.loads(out.stdout)
    assert status["brokers"][0]["cluster_members"] == expected
    assert status["brokers"][1] == {"address": f"127.0.0.4:{dead}", "reachable": False,
                                    "error": status["brokers"][1]["error"]}


def test_cluster_status_wait_does_not_wait_for_a_lone_broker() -> None:
    """``cluster-status --wait S`` asks again until the cluster formed; a single broker that is
    not clustered is as formed as it will get (before: every such call waited the S seconds)."""
    from amqp_broker.clustering.cli import _formed
    lone = {"reachable": True, "clustered": False, "cluster_view": None, "cluster_members": []}
    assert _formed([lone])
    assert not _formed([lone, {**lone, "reachable": False}])
    joining = {"reachable": True, "clustered": True, "cluster_view": 0x10000,
               "cluster_members": ["127.0.0.2:5672"]}
    assert not _formed([joining, {**joining}, {**joining}])   # one member, three asked
