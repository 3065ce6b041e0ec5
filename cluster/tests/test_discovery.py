"""Discovery: static seeds, the bound-address rule, and two brokers finding each other by mDNS
inside a private network namespace (``unshare -rn``, DESIGN §6)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.discovery import MdnsDiscovery, Seed, parse_seed, parse_seeds

ROOT = Path(__file__).resolve().parents[2]


def test_parse_seeds() -> None:
    assert parse_seed("10.0.0.5:5673") == Seed("10.0.0.5", 5673)
    assert parse_seed("broker-a") == Seed("broker-a", 5672)
    assert parse_seed("[::1]:5673") == Seed("::1", 5673)
    assert parse_seed("::1") == Seed("::1", 5672)
    assert parse_seed("[::1]:5673").address == "[::1]:5673"
    assert parse_seeds(["a:1,b:2", "a:1", " "]) == [Seed("a", 1), Seed("b", 2)]
    for bad in (":5672", "a:0", "a:70000", "a:x", "[::1]x", ""):
        with pytest.raises(ValueError):
            parse_seed(bad)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "localhost", ""])
def test_mdns_refuses_anything_but_a_concrete_address(host: str) -> None:
    with pytest.raises(ValueError):
        MdnsDiscovery("blue", "node-a", host, 5672)


def test_mdns_refuses_bad_names() -> None:
    for cluster, node in (("blue", ""), ("", "n"), ("b@d", "n"), ("blue", "n@x")):
        with pytest.raises(ValueError):
            MdnsDiscovery(cluster, node, "127.0.0.1", 5672)


def _unshare_works() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip not installed"
    probe = subprocess.run(["unshare", "-rn", "sh", "-c", "ip link set lo up"],
                           capture_output=True, text=True, timeout=10)
    if probe.returncode != 0:
        return f"unshare -rn unavailable here: {probe.stderr.strip()[:200]}"
    return None


def test_two_brokers_find_each_other_in_a_private_namespace() -> None:
    reason = _unshare_works()
    if reason:
        pytest.skip(reason)
    proc = subprocess.run(
        ["unshare", "-rn", "sh", "-c",
         f"ip link set lo up && exec {sys.executable} -m cluster.tests.discovery_child"],
        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["a_saw"] == {"node-b": ["127.0.0.2:5673", "0.1.0"]}   # not red's node-r
    assert result["b_saw"] == ["node-a"]
    assert result["a_after_goodbye"] == []
    # measured here: ~1.1 s from b's start (zeroconf probes for ~1.5 s before announcing)
    assert result["discovery_s"] < 5.0, result
    print(f"mDNS discovery {result['discovery_s']} s, goodbye seen in {result['goodbye_s']} s")
