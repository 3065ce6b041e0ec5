"""A policy set without ``apply-to`` applies to what RabbitMQ applies it to: every queue and
exchange (``all``), through the management API (``PUT /api/policies/{vhost}/{name}``) and
through ``ctl set_policy`` as through ``rabbitmqctl set_policy`` (its ``--apply-to`` defaults to
``all``). Differential: the same requests against ours and RabbitMQ 3.10 (rabbit_policy's
``apply-to`` default). Found following docs/federation.md: a ``federation-upstream-set`` policy
set without ``--apply-to exchanges`` federated no exchange here, and every exchange on RabbitMQ.
"""

from __future__ import annotations

import urllib.parse

import pytest

from interop_tests.test_management import _api
from interop_tests.test_management_ctl import ctl

pytestmark = pytest.mark.interop


def test_a_policy_without_apply_to_applies_to_all(management_broker):
    url = management_broker.api_url
    path = f"{url}/api/policies/%2F/{urllib.parse.quote('nc-default-apply-to')}"
    _api(path, "PUT", {"pattern": "^nc-default-apply-to$", "definition": {"max-length": 5}})
    try:
        assert _api(path)["apply-to"] == "all"
    finally:
        _api(path, "DELETE")


def test_ctl_set_policy_without_apply_to_applies_to_all(management_broker, tmp_path):
    url = management_broker.api_url
    out = ctl(tmp_path, "--url", url, "set_policy", "nc-ctl-default", "^nc-ctl-default$",
              '{"max-length": 5}')
    try:
        assert out.returncode == 0, out.stderr
        assert _api(f"{url}/api/policies/%2F/nc-ctl-default")["apply-to"] == "all"
    finally:
        _api(f"{url}/api/policies/%2F/nc-ctl-default", "DELETE")
