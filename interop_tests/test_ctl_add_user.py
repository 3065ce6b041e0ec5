"""``amqp-broker ctl add_user`` of a user that exists fails as ``rabbitmqctl add_user`` does:
exit 70 with ``Error:`` / ``User "NAME" already exists`` on stderr, and the user keeps its
password and tags. Differential: the same commands with rabbitmqctl against the private
RabbitMQ 3.10 node. Found following docs/operations.md and docs/tls-and-access.md, which both
run ``ctl add_user app ...``: the second one replaced app's password and cleared its tags.
"""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.request

import pytest

from interop_tests.rabbitmq_node import RabbitMQUnavailable, rabbitmq_ctl
from interop_tests.test_management_ctl import ctl

pytestmark = pytest.mark.interop


def _can_log_in(api_url: str, user: str, password: str) -> bool:
    req = urllib.request.Request(f"{api_url}/api/whoami", headers={
        "Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()})
    try:
        with urllib.request.urlopen(req, timeout=10):
            return True
    except urllib.error.HTTPError as exc:
        assert exc.code == 401
        return False


def test_add_user_of_an_existing_user_fails_and_keeps_it(management_broker, tmp_path):
    # our ctl, against our management API and against RabbitMQ's
    url = management_broker.api_url
    try:
        assert ctl(tmp_path, "--url", url, "add_user", "nc-dup", "first").returncode == 0
        # a management tag, so that the user may log in to the API (/api/whoami)
        assert ctl(tmp_path, "--url", url, "set_user_tags", "nc-dup", "management").returncode == 0
        again = ctl(tmp_path, "--url", url, "add_user", "nc-dup", "second")
        # rabbitmqctl may print its node's logger line first ("03:33:17.620 [warning] Failed
        # to add user ..."), at random: the answer is the rest
        told = [line for line in again.stderr.splitlines()
                if line and not re.match(r"^\d\d:\d\d:\d\d\.\d+ \[\w+\] ", line)]
        assert (again.returncode, told) == (70, ["Error:", 'User "nc-dup" already exists'])
        assert _can_log_in(url, "nc-dup", "first") and not _can_log_in(url, "nc-dup", "second")
    finally:
        ctl(tmp_path, "--url", url, "delete_user", "nc-dup")


def test_rabbitmqctl_add_user_of_an_existing_user_fails_and_keeps_it():
    # the reference: rabbitmqctl against the private RabbitMQ node
    try:
        assert rabbitmq_ctl("add_user", "nc-dup", "first").returncode == 0
        again = rabbitmq_ctl("add_user", "nc-dup", "second")
        # rabbitmqctl may print its node's logger line first ("03:33:17.620 [warning] Failed
        # to add user ..."), at random: the answer is the rest
        told = [line for line in again.stderr.splitlines()
                if line and not re.match(r"^\d\d:\d\d:\d\d\.\d+ \[\w+\] ", line)]
        assert (again.returncode, told) == (70, ["Error:", 'User "nc-dup" already exists'])
        assert rabbitmq_ctl("authenticate_user", "nc-dup", "first").returncode == 0
    except RabbitMQUnavailable as exc:
        pytest.skip(str(exc))
    finally:
        try:
            rabbitmq_ctl("delete_user", "nc-dup")
        except RabbitMQUnavailable:
            pass
