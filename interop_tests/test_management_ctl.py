"""``amqp-broker ctl`` run as an operator runs it (a subprocess), against real broker processes
(issue 22):

- lists per vhost, as rabbitmqctl's: with two vhosts ``list_exchanges`` prints each exchange of
  ``/`` once (columns name and type), ``-p VHOST`` those of another vhost; ``list_queues`` and
  ``list_bindings`` the same;
- several members: ``--url`` repeated (or comma-separated, or ``$AMQP_BROKER_CTL_URL``) with the
  first member down (a closed port): the second answers, and one stderr line says so;
- learnt members: ctl given only member A's URL of a two-broker cluster (127.0.0.2-3) learns B's
  management URL from A's ``/api/overview`` (which lists every member's listeners); once A is
  stopped, ctl with only A's URL still answers, through B (the cache file under the test's
  ``XDG_CACHE_HOME``);
- a reader of its output that goes away (``ctl ... | head -1``) gets no "Error: Broken pipe" line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pika
import pytest

from cluster.tests.processes import Cluster, api_get, start_with_api, wait_for
from interop_tests.conftest import REPO_ROOT, _free_port
from interop_tests.test_management import _api, _start

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


def ctl(cache: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m amqp_broker ctl ARGS`` with its member cache under ``cache``."""
    return subprocess.run([sys.executable, "-m", "amqp_broker", "ctl", *args],
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache), **(env or {})})


def _rows(out: str) -> list[list[str]]:
    return [line.split("\t") for line in out.splitlines()]


def test_lists_are_per_vhost_as_rabbitmqctl(broker_factory, tmp_path):
    _, http, _ = _start(broker_factory)
    url = f"http://127.0.0.1:{http}"
    _api(f"{url}/api/vhosts/shop", "PUT", {})
    _api(f"{url}/api/permissions/shop/guest", "PUT",
         {"configure": ".*", "write": ".*", "read": ".*"})
    _api(f"{url}/api/exchanges/shop/orders", "PUT", {"type": "topic"})
    _api(f"{url}/api/queues/shop/shipping", "PUT", {})
    _api(f"{url}/api/bindings/shop/e/orders/q/shipping", "POST", {"routing_key": "order.*"})
    _api(f"{url}/api/queues/%2F/root.q", "PUT", {})

    out = ctl(tmp_path, "--url", url, "list_exchanges")
    assert out.returncode == 0, out.stderr
    rows = _rows(out.stdout)
    assert rows[0] == ["name", "type"]
    names = [r[0] for r in rows[1:]]
    assert sorted(names) == sorted(set(names))   # each once, though two vhosts have them
    assert ["", "direct"] in rows and ["amq.topic", "topic"] in rows and "orders" not in names
    out = ctl(tmp_path, "--url", url, "list_exchanges", "-p", "shop", "name", "type", "vhost")
    assert out.returncode == 0, out.stderr
    assert ["orders", "topic", "shop"] in _rows(out.stdout)
    assert {r[2] for r in _rows(out.stdout)[1:]} == {"shop"}
    queues = ctl(tmp_path, "--url", url, "list_queues").stdout
    assert "root.q\t0" in queues and "shipping" not in queues
    queues = ctl(tmp_path, "--url", url, "-p", "shop", "list_queues").stdout
    assert _rows(queues) == [["name", "messages"], ["shipping", "0"]]
    bindings = _rows(ctl(tmp_path, "--url", url, "list_bindings", "-p", "shop").stdout)
    assert ["orders", "shipping", "queue", "order.*"] in bindings
    assert all(r[1] != "root.q" for r in bindings)
    missing = ctl(tmp_path, "--url", url, "list_exchanges", "-p", "no-such-vhost")
    assert missing.returncode == 1 and missing.stderr.startswith("Error:")


def test_first_member_down_the_next_one_answers(broker_factory, tmp_path):
    broker, http, _ = _start(broker_factory)
    with pika.BlockingConnection(pika.URLParameters(broker.uri)) as conn:
        conn.channel().queue_declare("ctl.failover")
    down = f"http://127.0.0.1:{_free_port()}"   # nothing listens there: refused
    up = f"http://127.0.0.1:{http}"
    for args, env in ((["--url", down, "--url", up], None), (["--url", f"{down},{up}"], None),
                      ([], {"AMQP_BROKER_CTL_URL": f"{down},{up}"})):
        out = ctl(tmp_path, *args, "list_queues", env=env)
        assert out.returncode == 0, out.stderr
        assert "ctl.failover\t0" in out.stdout
        lines = out.stderr.splitlines()
        assert len(lines) == 1 and down in lines[0] and lines[0].endswith(f"answered by {up}")
    quiet = ctl(tmp_path, "--url", up, "--url", down, "list_queues")
    assert quiet.returncode == 0 and quiet.stderr == ""   # the first answered: nothing to say
    # an HTTP error is an answer: no other member is asked
    refused = ctl(tmp_path, "--url", up, "--url", down, "--password", "wrong", "list_queues")
    assert refused.returncode == 1 and refused.stderr == "Error: Login failed\n"
    gone = ctl(tmp_path, "--url", down, "list_queues")
    assert gone.returncode == 69 and down in gone.stderr
    # a remembered member is used only while its URL still serves the node it was
    node = _api(f"{up}/api/overview")["node"]
    cache_file = tmp_path / "amqp-broker" / "ctl-members.json"
    assert not cache_file.exists()   # a lone broker has no other member to remember
    cache_file.parent.mkdir()
    for remembered, code in (("another-node", 69), (node, 0)):
        cache_file.write_text(json.dumps({down: {"members": [{"url": up, "node": remembered}]}}))
        out = ctl(tmp_path, "--url", down, "list_queues")
        assert out.returncode == code, out.stderr
        assert (f"is node {node}, not another-node" in out.stderr) == (code == 69)


def test_members_learnt_from_one_answer_when_it_is_down(tmp_path):
    cluster = Cluster.create(tmp_path)
    try:
        a, url_a = start_with_api(cluster, 2, None)
        b, url_b = start_with_api(cluster, 3, a)
        wait_for(lambda: a.members() == b.members() == [a.address, b.address], 15,
                 "no view of two")
        with b.connect() as conn:
            conn.channel().queue_declare("learnt.q")
        # A's overview lists B's listeners, which A read from B's Connection.Start
        b_port = int(url_b.rsplit(":", 1)[1])
        wait_for(lambda: {"node": "n3", "protocol": "http", "ip_address": b.host,
                          "port": b_port, "socket_opts": {}}
                 in (api_get(url_a, "/overview") or {}).get("listeners", []), 10,
                 "A's overview does not list B's management listener")
        cache = tmp_path / "cache"
        first = ctl(cache, "--url", url_a, "list_queues")
        assert first.returncode == 0 and "learnt.q\t0" in first.stdout, first.stderr
        remembered = json.loads((cache / "amqp-broker" / "ctl-members.json").read_text())
        assert remembered[url_a]["members"] == [{"url": url_b, "node": "n3"}]
        cluster.terminate(a)
        out = ctl(cache, "--url", url_a, "list_queues")
        assert out.returncode == 0, out.stderr
        assert "learnt.q\t0" in out.stdout
        assert out.stderr.count("\n") == 1 and out.stderr.strip().endswith(
            f"answered by {url_b}")
        again = ctl(cache, "--url", url_a, "list_queues")   # B is still remembered
        assert again.returncode == 0 and "learnt.q\t0" in again.stdout, again.stderr
        cluster.terminate(b)
        gone = ctl(cache, "--url", url_a, "list_queues")
        assert gone.returncode == 69 and url_a in gone.stderr and url_b in gone.stderr
    finally:
        cluster.stop_all()


def test_a_reader_that_goes_away_gets_no_error_line(management_broker, tmp_path):
    # `ctl cluster_status | head -5` printed "Error: [Errno 32] Broken pipe": here stdout is a
    # pipe whose reader is gone before ctl writes, so the first write fails every time
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        out = subprocess.run([sys.executable, "-m", "amqp_broker", "ctl", "--url",
                              management_broker.api_url, "list_exchanges"],
                             stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
                             cwd=REPO_ROOT, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)})
    finally:
        os.close(write_end)
    assert out.stderr == ""
    assert out.returncode == 1
