"""``--cluster NAME`` without seeds: brokers find each other by mDNS and form one view.

Pure tests of the seed choice (``amqp_broker.clustering.discovery.choose_seeds``), then real broker
processes inside a private network namespace the test makes itself (``unshare -rn``, ``lo`` up;
DESIGN.md §6: zeroconf never touches the machine's interfaces): n2 and n3 (127.0.0.2/3) started
together with ``--cluster testnet`` and no seed end up in one view, n2 (the lowest address, the
founder of a cold start) first; n4 started later joins them.

Run as a module: ``python -m cluster.tests.test_zeroconf_join child end_to_end DIR`` (inside the
namespace: the scenario with plain ``python -m amqp_broker`` brokers, one JSON line on stdout).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from amqp_broker.clustering.discovery import Found, canonical, choose_seeds, mdns_label

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "testnet"


# ----------------------------------------------------------------------------- pure seed choice

def _in_view(address: str, *members: str) -> Found:
    return Found("x", address, {"cluster_view": 65537, "cluster_members": list(members)})


def _starting(address: str) -> Found:
    return Found("x", address, {"cluster_name": "amqp-broker"})   # discovery still running


def test_joins_through_brokers_already_in_a_view() -> None:
    found = [_in_view("127.0.0.3:5672", "127.0.0.3:5672", "127.0.0.5:5672"),
             _starting("127.0.0.1:5672"), Found("dead", "127.0.0.9:5672", None)]
    # lower addresses do not matter when a view exists; its other members are seeds too
    assert choose_seeds("127.0.0.2:5672", found) == [("", "127.0.0.3:5672"),
                                                     ("", "127.0.0.5:5672")]


def test_a_broker_that_reports_a_view_it_is_not_in_is_not_a_seed() -> None:
    joining = Found("j", "127.0.0.3:5672", {"cluster_view": 0, "cluster_members": []})
    assert not joining.in_view
    assert not _in_view("127.0.0.3:5672", "127.0.0.4:5672").in_view


def test_cold_start_the_lowest_answering_address_founds() -> None:
    a, b, c = "127.0.0.2:5672", "127.0.0.3:5672", "127.0.0.10:5672"
    assert choose_seeds(a, [_starting(b), _starting(c)]) == []
    assert choose_seeds(b, [_starting(a), _starting(c)]) == [("", a), ("", c)]
    assert choose_seeds(c, [_starting(b), _starting(a)]) == [("", a), ("", b)]   # numeric order
    # a stale record (killed broker, no goodbye) does not answer: never chosen as founder
    assert choose_seeds(b, [Found("gone", a, None)]) == []
    assert choose_seeds(a, []) == []


def test_addresses_compare_with_or_without_ipv6_brackets() -> None:
    assert canonical("[::1]:5672") == canonical("::1:5672") == "::1:5672"
    assert _in_view("[::1]:5672", "::1:5672").in_view
    assert choose_seeds("::1:5672", [_in_view("[::1]:5672", "::1:5672")]) == []


def test_mdns_label_replaces_the_reserved_at_sign() -> None:
    assert mdns_label("amqp-broker@host") == "amqp-broker-host"
    assert mdns_label("n2") == "n2"


# ----------------------------------------------------------------------------- in a namespace

def _unshare_works() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip not installed"
    probe = subprocess.run(["unshare", "-rn", "sh", "-c", "ip link set lo up"],
                           capture_output=True, text=True, timeout=10)
    if probe.returncode != 0:
        return f"unshare -rn unavailable here: {probe.stderr.strip()[:200]}"
    return None


def _run_child(mode: str, base: Path) -> dict[str, Any]:
    reason = _unshare_works()
    if reason:
        pytest.skip(reason)
    proc = subprocess.run(
        ["unshare", "-rn", "sh", "-c", "ip link set lo up && exec \"$0\" -m "
         f"cluster.tests.test_zeroconf_join child {mode} \"$1\"", sys.executable, str(base)],
        cwd=ROOT, capture_output=True, text=True, timeout=50)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.timeout(60)
def test_two_brokers_started_together_join_by_mdns_end_to_end(tmp_path: Path) -> None:
    result = _run_child("end_to_end", tmp_path)
    print(f"one view of two after {result['pair_s']} s, third member after {result['third_s']} s")
    assert result["pair"] == ["n2", "n3"]
    assert result["third"] == ["n2", "n3", "n4"]


# ----------------------------------------------------------------------------- child side

def _child(mode: str, base: Path) -> int:
    """The scenario (inside the namespace): n2 + n3 together, then n4; prints one JSON line."""
    from cluster.tests.processes import Cluster, Member, free_port

    launcher = ["-m", "amqp_broker"]
    cluster = Cluster.create(base)
    result: dict[str, Any] = {}

    def start(octet: int) -> Member:
        """As ``Cluster.start`` (same flags, log, data dir), but through ``launcher``."""
        host, name = f"127.0.0.{octet}", f"n{octet}"
        member = Member(name, host, free_port(host), base / name, base / f"{name}.log")
        cluster.members[name] = member
        cmd = [sys.executable, *launcher, "--host", host, "--port", str(member.port),
               "--data-dir", str(member.data_dir), "--node-name", name, "--cluster-secret",
               str(cluster.secret_file), "--ping-interval", "0.25", "--log-level", "info",
               "--cluster", CLUSTER]
        member.proc = subprocess.Popen(cmd, stdout=open(member.log_path, "a"),
                                       stderr=subprocess.STDOUT, start_new_session=True)
        return member

    def names(member: Member) -> list[str] | None:
        from amqp_broker.clustering.cli import server_properties
        try:
            props = server_properties(member.host, member.port, 1.0)
        except OSError:
            return None
        return [n.decode() if isinstance(n, bytes) else n
                for n in props.get("cluster_member_names") or []]

    def wait(members: list[Member], expected: list[str], timeout: float) -> float | None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if all(names(m) == expected for m in members):
                return round(time.monotonic() - t0, 2)
            time.sleep(0.1)
        return None

    try:
        n2, n3 = start(2), start(3)
        result["pair_s"] = wait([n2, n3], ["n2", "n3"], 12)
        result["pair"] = names(n2) if result["pair_s"] is not None else [names(n2), names(n3)]
        if result["pair_s"] is not None:
            n4 = start(4)
            result["third_s"] = wait([n2, n3, n4], ["n2", "n3", "n4"], 12)
            result["third"] = names(n4)
        ok = result.get("third_s") is not None
        if not ok:
            for m in cluster.members.values():
                sys.stderr.write(f"--- {m.name}\n{m.log_tail(25)}\n")
    finally:
        cluster.stop_all()
    print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(_child(sys.argv[2], Path(sys.argv[3])))
