"""Runtime parameters through the cluster metadata log, in real brokers (issues 27 and 23): a
dynamic shovel PUT on one member of three is listed by every member's ``/api/parameters``,
exactly one member runs it (the metadata leader; the others report it run there) and it moves
each message once; when that member is killed, another (the new leader) takes it over; a DELETE
on a third member removes it everywhere. Before the log carried
parameters, each member kept those it was given: the shovel existed on one member only.
A single broker's shovels go into the log when it founds a cluster (run with
``AMQP_FAULTS_ALL=1`` only, for ``make test``'s budget: two broker starts, ~10 s).
Source: RabbitMQ "Dynamic Shovels" (one node runs a shovel), "Metadata store". Network:
127.0.0.0/8 only; every wait is bounded.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pika
import pytest

from cluster.tests.processes import Member, api_get, free_port, wait_for
from cluster.tests.quorum_scenarios import drain
from cluster.tests.rolling import start_cluster

pytestmark = pytest.mark.timeout(120)

_AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()
SHOVEL = {"src-uri": "amqp://", "src-queue": "moved.src", "dest-uri": "amqp://",
          "dest-queue": "moved.dst"}


def _send(url: str, method: str, path: str, body: object = None) -> int:
    """``method`` ``url``/api``path`` as guest with a JSON ``body``: the HTTP status."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + "/api" + path, data=data, method=method,
                                 headers={"Authorization": _AUTH,
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _shovels(url: str, local: bool = False) -> list[dict]:
    """``GET /api/shovels`` (``local``: this member's own state, not the runner's)."""
    got = api_get(url, "/shovels?local=1" if local else "/shovels")
    return got if isinstance(got, list) else []


def _parameters(url: str) -> list[dict]:
    got = api_get(url, "/parameters/shovel")
    return got if isinstance(got, list) else []


def test_a_shovel_put_on_one_member_runs_once_moves_on_and_a_delete_elsewhere_ends_it(
        cluster):
    (n2, n3, n4), urls, _ = start_cluster(cluster)   # the joiners start together
    url2, url3, url4 = urls["n2"], urls["n3"], urls["n4"]
    members: list[tuple[Member, str]] = [(n2, url2), (n3, url3), (n4, url4)]
    conn = n2.connect()
    for q in ("moved.src", "moved.dst"):
        conn.channel().queue_declare(q, durable=True)
    conn.close()

    assert _send(url3, "PUT", "/parameters/shovel/%2F/mover", {"value": SHOVEL}) == 201
    assert _send(url3, "PUT", "/parameters/shovel/%2F/bad", {"value": {"src-uri": "amqp://"}}) \
        == 400   # RabbitMQ's validation, decided in the log
    wait_for(lambda: all([(p["name"], p["value"]) for p in _parameters(u)] == [("mover", SHOVEL)]
                         for _, u in members), 10, "the parameter is not on every member")
    # federation upstreams go the same way (no policy asks for a link: none runs)
    upstream = {"uri": "amqp://127.0.0.1:1", "max-hops": 2}
    assert _send(url4, "PUT", "/parameters/federation-upstream/%2F/up", {"value": upstream}) \
        == 201
    assert all(api_get(u, "/parameters/federation-upstream") == [
        {"value": upstream, "vhost": "/", "component": "federation-upstream", "name": "up"}]
        for _, u in members)   # sync-replies all: applied everywhere once answered
    assert _send(url2, "DELETE", "/parameters/federation-upstream/%2F/up") == 204
    assert all(api_get(u, "/parameters/federation-upstream") == [] for _, u in members)

    found: list[Member] = []

    def running() -> list[Member]:
        found[:] = [m for m, u in members if [s["state"] for s in _shovels(u, local=True)
                                              if s["name"] == "mover"] == ["running"]]
        return found

    wait_for(lambda: len(running()) == 1, 15, "the shovel did not start on one member")
    runner = found[0]
    others = [u for m, u in members if m is not runner]
    for u in others:
        wait_for(lambda u=u: [s.get("reason") for s in _shovels(u, local=True)]
                 == [f"run by member {runner.name}, the cluster metadata leader"], 5,
                 "a member that does not run the shovel does not name the one that does")
        # as RabbitMQ's, every member's answer lists the shovel once, run where it runs
        assert [(s["node"], s["state"]) for s in _shovels(u)] == [(runner.name, "running")]
    assert len(running()) == 1

    def move(on: Member, numbers: range) -> None:
        conn = on.connect()
        ch = conn.channel()
        ch.confirm_delivery()
        for i in numbers:
            ch.basic_publish("", "moved.src", str(i).encode(),
                             pika.BasicProperties(delivery_mode=2))
        conn.close()
        got = drain(on, "moved.dst", quiet=0.5, timeout=30)
        assert sorted(got, key=int) == [str(i) for i in numbers]   # each message, once

    move(runner, range(100))

    # the member that runs it dies: the next metadata leader takes it over
    cluster.kill(runner)
    members = [(m, u) for m, u in members if m is not runner]
    wait_for(lambda: len(running()) == 1, 15, "no other member took the shovel over")
    move(found[0], range(100, 120))

    # a DELETE on the last member (n4, unless it was the one killed)
    assert _send(members[-1][1], "DELETE", "/parameters/shovel/%2F/mover") == 204
    wait_for(lambda: all(not _parameters(u) and not _shovels(u) for _, u in members), 10,
             "the shovel was not removed from every member")
    assert _send(members[0][1], "DELETE", "/parameters/shovel/%2F/mover") == 404


@pytest.mark.skipif(os.environ.get("AMQP_FAULTS_ALL") != "1",
                    reason="two broker starts (~10 s): AMQP_FAULTS_ALL=1 runs it")
def test_a_single_brokers_shovel_goes_into_the_log_when_it_founds_a_cluster(cluster):
    """A broker that ran alone (its shovels in parameters.json) and is started as a cluster
    founds the metadata log with its definitions and its parameters: the shovel stays and runs
    (before, the log's empty parameters replaced them: the shovel was gone)."""
    host, mport = "127.0.0.5", free_port("127.0.0.5")
    url, data = f"http://{host}:{mport}", cluster.base / "n5"
    with open(cluster.base / "alone.log", "a") as out:
        alone = subprocess.Popen(
            [sys.executable, "-m", "amqp_broker", "--host", host, "--port",
             str(free_port(host)), "--data-dir", str(data), "--node-name", "n5",
             "--management-port", str(mport), "--prometheus-port", "0"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: api_get(url, "/overview") is not None, 20, "the broker did not start")
        assert _send(url, "PUT", "/parameters/shovel/%2F/kept", {"value": SHOVEL}) == 201
    finally:
        alone.terminate()
        alone.wait(15)
    n5 = cluster.start(5, None, "--management-port", str(mport))
    wait_for(lambda: [p["name"] for p in _parameters(url)] == ["kept"]
             and [s["state"] for s in _shovels(url)] == ["running"], 15,
             f"the shovel did not survive founding the cluster:\n{n5.log_tail()}")
