"""The membership as the metadata log's configuration (issue 23 step 6), with real brokers, pika
and ``amqp-broker ctl``.

What a RabbitMQ 4 user (Khepri on Raft) expects:

- a broker shows as a member (and serves clients) once it is a voter of the metadata
  configuration: a quorum queue declared right then, on any member, gets a replica on it;
- the founder killed while two brokers join it, then restarted, gives one cluster: one view,
  one metadata log (a redeclare with other arguments on another member is refused 406), never a
  second log founded by a joiner that was not added yet;
- after a kill -9 of every member, one broker back alone serves no definition change (it is a
  minority of its last configuration) until a majority is back;
- ``ctl force_boot`` on that stopped broker makes its next start serve alone, with the
  definitions its log had.

The formation and power-loss cases start and kill several brokers (~30-60 s on the loaded
machine): they run with ``AMQP_FAULTS_ALL=1`` only, as the fault harness's long cases (``make
test``'s budget). Every wait is bounded. Network: 127.0.0.0/8 only.
"""

from __future__ import annotations

import os
import time
from functools import partial

import pika
import pika.exceptions
import pytest

from amqp_broker.management import ctl
from cluster.tests.processes import Cluster, Member, api_get, start_with_api, wait_for
from cluster.tests.quorum_scenarios import declare

pytestmark = pytest.mark.timeout(240)

LONG = pytest.mark.skipif(os.environ.get("AMQP_FAULTS_ALL") != "1",
                          reason="several brokers started and killed (~30-60 s): "
                                 "AMQP_FAULTS_ALL=1 runs it")


def _declare(member: Member, name: str, **arguments: object) -> int:
    """Queue.Declare of durable ``name`` on ``member``: 0 for Ok, else the reply code."""
    conn = member.connect()
    try:
        conn.channel().queue_declare(name, durable=True, arguments=arguments or None)
        return 0
    except (pika.exceptions.ChannelClosedByBroker,
            pika.exceptions.ConnectionClosedByBroker) as exc:
        return exc.reply_code
    finally:
        if conn.is_open:
            conn.close()


def test_a_quorum_queue_declared_right_after_a_join_has_a_replica_on_the_joiner(
        cluster: Cluster):
    """Declared on the founder the moment its view (Connection.Start's ``cluster_members``,
    what cluster-status shows) lists the joiner: the group has both (one broker fewer than the
    issue's three-broker case, the same race, for ``make test``'s budget)."""
    n2, url = start_with_api(cluster, 2, None)
    n3 = cluster.start(3, n2, wait=False)
    wait_for(lambda: n3.address in (n2.members() or []), 30,
             f"n3 never joined:\n{n3.log_tail()}", 0.01)
    declare(n2, "qq.after-join")   # at once
    got = api_get(url, "/queues/%2F/qq.after-join")
    assert isinstance(got, dict), got
    assert sorted(got.get("members") or []) == ["n2", "n3"], (got, n3.log_tail(20))
    wait_for(n3.serving, 30, f"n3 does not serve:\n{n3.log_tail()}")


def test_the_metadata_log_follows_the_view_leader_after_it_is_killed(cluster: Cluster):
    """The view's first member leads the metadata log too (one leader, issue 23): after the
    leader n2 is killed, whichever survivor the log elects, its leadership ends with the new
    view's leader (``ALIGN_AFTER_MS`` then a Raft leadership transfer), as
    ``/api/cluster-status`` shows on both survivors."""
    n2, _ = start_with_api(cluster, 2, None)
    n3, url3 = start_with_api(cluster, 3, n2)
    n4, url4 = start_with_api(cluster, 4, n2)

    def led_by_view_leader(url: str, names: list[str]) -> bool:
        got = api_get(url, "/cluster-status")
        return (isinstance(got, dict) and got.get("member_names") == names
                and (got.get("metadata_store") or {}).get("leader") == names[0])

    wait_for(lambda: led_by_view_leader(url3, ["n2", "n3", "n4"]), 30,
             f"n2 does not lead both:\n{n3.log_tail()}")
    cluster.kill(n2)
    for url, m in ((url3, n3), (url4, n4)):
        wait_for(partial(led_by_view_leader, url, ["n3", "n4"]), 30,
                 f"{m.name}: {api_get(url, '/cluster-status')}\n{m.log_tail(20)}")


@LONG
def test_the_founder_killed_during_a_formation_gives_one_cluster(cluster: Cluster):
    """Power lost the moment the third broker is in the view, before the metadata leader added
    it; the two joiners come back first, then the founder. Before, the joiner that restarted
    the view founded a second metadata log from its own (empty) data; now nobody serves until
    the founder's log has a majority, and the three share one log."""
    n2 = cluster.start(2)
    n3 = cluster.start(3, n2)
    n4 = cluster.start(4, n2, wait=False)
    wait_for(lambda: "cluster view" in n4.log_tail(200), 30, f"n4 never joined:\n{n4.log_tail()}",
             0.01)
    cluster.kill_together([n2, n3, n4])
    for m in (n4, n3):   # the joiners first: they have votes in the last view
        cluster.start(int(m.host.rsplit(".", 1)[1]), wait=False)
    time.sleep(8.0)      # twice the 4 s after which a restarted member may restart the view
    cluster.start(2, wait=False)
    members = [n2, n3, n4]
    view = sorted(m.address for m in members)
    wait_for(lambda: all(sorted(m.members() or []) == view for m in members), 60,
             "no view of the three:\n" + "\n".join(m.log_tail(15) for m in members))
    for m in members:
        wait_for(m.serving, 40, f"{m.name} does not serve:\n{m.log_tail()}", 0.2)
    assert _declare(n4, "one.log", **{"x-max-length": 1}) == 0
    assert _declare(n3, "one.log", **{"x-max-length": 2}) == 406   # the same log decided it
    assert _declare(n2, "one.log", **{"x-max-length": 3}) == 406
    for m in members:
        wait_for(partial(m.has_queue, "one.log"), 20, f"{m.name} lacks it")


@LONG
def test_after_a_power_loss_one_broker_alone_serves_no_change_until_force_boot(tmp_path):
    cluster = Cluster.create(tmp_path, "--metadata-timeout", "2")
    try:
        n2, n3, n4 = cluster.start_three(timeout=30)
        for m in (n2, n3, n4):
            wait_for(m.serving, 40, f"{m.name} does not serve:\n{m.log_tail()}", 0.2)
        assert _declare(n3, "kept") == 0
        wait_for(lambda: n2.has_queue("kept"), 20, "n2 never had the queue")
        cluster.kill_together([n2, n3, n4])
        cluster.start(2, wait=False)   # alone: one of three
        wait_for(lambda: n2.members() is not None, 20, f"n2 did not come up:\n{n2.log_tail()}")
        time.sleep(6.0)   # well past the 2 s metadata timeout and a recovery round's 4 s
        assert not n2.serving() or _declare(n2, "while-alone") == 541
        cluster.kill(n2)
        assert ctl.main(["force_boot", "--data-dir", str(n2.data_dir)]) == 0
        cluster.start(2, wait=False)
        wait_for(n2.serving, 40, f"n2 does not serve after force_boot:\n{n2.log_tail()}", 0.2)
        assert n2.has_queue("kept")
        assert _declare(n2, "after-force-boot") == 0
        assert not (n2.data_dir / "force_boot").exists()
    finally:
        cluster.stop_all()


def test_ctl_force_boot_writes_the_marker_of_a_stopped_broker(tmp_path, capsys):
    """The operator's side alone (no broker): exit 0 and the marker the next start reads; 2
    without ``--data-dir``; 1 for a directory that is not there."""
    assert ctl.main(["force_boot", "--data-dir", str(tmp_path)]) == 0
    assert (tmp_path / "force_boot").exists()
    assert "Forcing boot" in capsys.readouterr().out
    assert ctl.main(["force_boot"]) == 2
    assert ctl.main(["force_boot", "--data-dir", str(tmp_path / "nosuch")]) == 1
