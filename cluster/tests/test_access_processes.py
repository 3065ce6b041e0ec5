"""Users, vhosts and permissions on a real 3-broker cluster (issue 13, "Users, vhosts,
permissions ... replicated to every cluster member"; "Every vhost, not only /, propagates"):
``amqp-broker ctl add_vhost`` / ``add_user`` / ``set_permissions`` on one member reach the others
and a later joiner; a pika client logs in as that user on another member and declares, binds,
consumes and publishes in that vhost (the declarations reach every member, and a message
published on one member is delivered to a consumer on another); a user without write permission
gets 403 on every member; a password changed on one member changes everywhere; a vhost deleted
on one member goes everywhere. Source: RabbitMQ "Access Control", "Virtual Hosts", "Clustering
Guide" (users, vhosts and permissions are cluster-wide).
"""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ProbableAuthenticationError

from amqp_broker.management import ctl
from cluster.tests.processes import Member, api_get, start_with_api, wait_for

pytestmark = pytest.mark.timeout(180)
_start, _get = start_with_api, api_get


def _connect(member: Member, user: str, password: str, vhost: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        member.host, member.port, vhost, pika.PlainCredentials(user, password),
        connection_attempts=1))


def _refused_publish(member: Member) -> tuple[int, str]:
    """bob (no write permission in vhost shop) publishes to exchange orders: the broker's 403."""
    conn = _connect(member, "bob", "bob-pw", "shop")
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        with pytest.raises(ChannelClosedByBroker) as err:
            ch.basic_publish("orders", "new", b"x")
        return err.value.reply_code, err.value.reply_text
    finally:
        conn.close()


def test_users_vhosts_and_permissions_reach_every_member_and_a_joiner(cluster):
    n2, url2 = _start(cluster, 2, None)
    n3, url3 = _start(cluster, 3, n2)
    n4, url4 = _start(cluster, 4, n2)
    view = [n2.address, n3.address, n4.address]
    wait_for(lambda: all(m.members() == view for m in (n2, n3, n4)), 15, "no agreed view")

    for args in (["add_vhost", "shop"], ["add_user", "alice", "s3cret"],
                 ["set_user_tags", "alice", "management"],
                 ["set_permissions", "-p", "shop", "alice", ".*", ".*", ".*"],
                 ["add_user", "bob", "bob-pw"],
                 ["set_permissions", "-p", "shop", "bob", ".*", "^$", ".*"]):
        assert ctl.main(["--url", url3, *args]) == 0, args
    wait_for(lambda: all(_get(u, "/permissions/shop/bob") for u in (url2, url4)), 10,
             "the user, vhost and permissions did not reach n2 and n4")
    alice3 = _get(url3, "/users/alice")
    for url in (url2, url4):
        alice = _get(url, "/users/alice")
        assert isinstance(alice, dict) and isinstance(alice3, dict)
        # the salted hash travelled (not the password, re-hashed with another salt)
        assert alice["password_hash"] == alice3["password_hash"]
        assert alice["hashing_algorithm"] == "rabbit_password_hashing_sha256"
        assert alice["tags"] == ["management"]
        assert _get(url, "/permissions/shop/alice") == {
            "user": "alice", "vhost": "shop", "configure": ".*", "write": ".*", "read": ".*"}

    # alice works in vhost shop on n4; the declarations reach n2, whose consumer gets a
    # message published on n4 (dealt across the cluster in a vhost other than "/")
    conn4 = _connect(n4, "alice", "s3cret", "shop")
    ch4 = conn4.channel()
    ch4.exchange_declare("orders", "direct", durable=True)
    ch4.queue_declare("new-orders", durable=True)
    ch4.queue_bind("new-orders", "orders", "new")
    wait_for(lambda: _get(url2, "/queues/shop/new-orders") is not None
             and _get(url2, "/bindings/shop/e/orders/q/new-orders"), 10,
             "the queue and binding did not reach n2")
    assert isinstance(_get(url3, "/exchanges/shop/orders"), dict)
    conn2 = _connect(n2, "alice", "s3cret", "shop")
    ch2 = conn2.channel()
    got: list[bytes] = []
    ch2.basic_consume("new-orders", lambda ch, m, p, body: got.append(body), auto_ack=True)
    ch4.confirm_delivery()
    for i in range(5):
        ch4.basic_publish("orders", "new", f"order {i}".encode())
    wait_for(lambda: conn2.process_data_events(0.05) or len(got) == 5, 15,
             f"the consumer on n2 got {got}")
    assert sorted(got) == [f"order {i}".encode() for i in range(5)]
    conn2.close()
    conn4.close()

    # bob may read but not write, on every member
    for member in (n2, n3, n4):
        code, text = _refused_publish(member)
        assert code == 403
        assert text == ("ACCESS_REFUSED - write access to exchange 'orders' in vhost 'shop' "
                        "refused for user 'bob'")

    # a broker that joins later gets the users, vhosts, permissions and declarations
    n5, url5 = _start(cluster, 5, n2)
    wait_for(lambda: _get(url5, "/permissions/shop/bob") is not None, 15,
             "the joiner has no permissions for bob")
    conn5 = _connect(n5, "alice", "s3cret", "shop")
    ch5 = conn5.channel()
    ch5.exchange_declare("orders", "direct", durable=True, passive=True)
    assert ch5.queue_declare("new-orders", durable=True, passive=True).method.queue == "new-orders"
    conn5.close()
    assert _refused_publish(n5)[0] == 403

    # a password changed on n5 changes on n3; a vhost deleted on n4 goes from n2
    assert ctl.main(["--url", url5, "change_password", "alice", "n3w"]) == 0
    wait_for(lambda: (_get(url3, "/users/alice") or {}).get("password_hash")
             == (_get(url5, "/users/alice") or {}).get("password_hash"), 10,
             "the new password did not reach n3")
    with pytest.raises(ProbableAuthenticationError):
        _connect(n3, "alice", "s3cret", "shop")
    _connect(n3, "alice", "n3w", "shop").close()
    assert ctl.main(["--url", url4, "add_vhost", "scratch"]) == 0
    wait_for(lambda: _get(url2, "/vhosts/scratch") is not None, 10, "scratch did not reach n2")
    assert ctl.main(["--url", url4, "delete_vhost", "scratch"]) == 0
    wait_for(lambda: _get(url2, "/vhosts/scratch") is None
             and _get(url5, "/vhosts/scratch") is None, 10, "the deletion did not reach n2, n5")
