"""The management API, Prometheus metrics, ``amqp-broker ctl`` and the web page against a real
broker process, with real tools (issue 13):

- (``rabbitmqadmin``, the API's status codes and Flower run against both brokers in
  ``test_management_differential``);
- ``promtool check metrics`` (Debian's prometheus) on /metrics and /metrics/per-object, and the
  rabbitmq_prometheus names a Grafana dashboard joins on; message counters grow with traffic;
- ``amqp-broker ctl`` (add_user, set_permissions, list_queues, export/import_definitions);
- a user without write permission publishing with pika: channel closed with 403 and RabbitMQ's
  text; a guest login from a non-loopback address is refused (AMQP and HTTP alike);
- headless Chromium (Debian's chromium, driven by Playwright's client): the page logs in and
  shows a queue the test declared with its message count; the screenshot is kept in the test's
  tmp dir (and written to docs/management.png when AMQP_BROKER_SCREENSHOT_DOCS=1).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pika
import pytest

from interop_tests.conftest import REPO_ROOT, _free_port

pytestmark = pytest.mark.interop



def _start(broker_factory, *extra: str, data_dir: Path | None = None):
    http, prom = _free_port(), _free_port()
    broker = broker_factory("--management-port", str(http), "--prometheus-port", str(prom),
                            *extra, data_dir=data_dir)
    _wait_http(f"http://127.0.0.1:{http}/api/overview")
    return broker, http, prom


def _wait_http(url: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            _api(url, "GET")
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _api(url: str, method: str = "GET", body=None, user: str = "guest", password: str = "guest"):
    req = urllib.request.Request(url, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Basic " + base64.b64encode(
                                     f"{user}:{password}".encode()).decode(),
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
        return json.loads(raw) if raw.strip() else None


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed "
                    "(Debian prometheus; interop_tests/setup.sh installs it)")
def test_prometheus_metrics_pass_promtool_and_count(broker_factory):
    broker, _, prom = _start(broker_factory)
    with pika.BlockingConnection(pika.URLParameters(broker.uri)) as conn:
        ch = conn.channel()
        ch.queue_declare("prom.q")
        ch.confirm_delivery()
        for i in range(5):
            ch.basic_publish("", "prom.q", b"m%d" % i)
        for _ in range(2):
            method, _, _ = ch.basic_get("prom.q")
            ch.basic_ack(method.delivery_tag)
        for path in ("/metrics", "/metrics/per-object"):
            text = urllib.request.urlopen(f"http://127.0.0.1:{prom}{path}", timeout=10).read()
            check = subprocess.run(["promtool", "check", "metrics"], input=text,
                                   capture_output=True, timeout=60)
            assert check.returncode == 0, check.stdout + check.stderr
        lines = {line.split(" ")[0]: line.rsplit(" ", 1)[1] for line in text.decode().splitlines()
                 if line and not line.startswith("#")}
    assert lines['rabbitmq_global_messages_received_total{protocol="amqp091"}'] == "5.0"
    assert lines['rabbitmq_global_messages_confirmed_total{protocol="amqp091"}'] == "5.0"
    classic = 'protocol="amqp091",queue_type="rabbit_classic_queue"'
    assert lines[f'rabbitmq_global_messages_delivered_total{{{classic}}}'] == "2.0"
    assert lines[f'rabbitmq_global_messages_acknowledged_total{{{classic}}}'] == "2.0"
    assert lines['rabbitmq_queue_messages_ready{queue="prom.q",vhost="/"}'] == "3.0"
    assert any(k.startswith("rabbitmq_identity_info{") for k in lines)
    for name in ("rabbitmq_connections", "rabbitmq_channels", "rabbitmq_process_open_fds",
                 "rabbitmq_process_resident_memory_bytes", "rabbitmq_cluster_view",
                 "rabbitmq_alarms_memory_used_watermark"):
        assert name in lines


def _ctl(http: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amqp_broker", "ctl", "--url",
                           f"http://127.0.0.1:{http}", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO_ROOT)


def test_ctl_and_write_permission_refused(broker_factory, tmp_path):
    broker, http, _ = _start(broker_factory)
    assert _ctl(http, "add_user", "reader", "pw").returncode == 0
    assert _ctl(http, "set_permissions", "-p", "/", "reader", ".*", "^$", ".*").returncode == 0
    assert _ctl(http, "set_user_tags", "reader", "management").returncode == 0
    with pika.BlockingConnection(pika.URLParameters(broker.uri)) as conn:
        conn.channel().queue_declare("ctl.q")
    listing = _ctl(http, "list_queues", "name", "messages")
    assert listing.returncode == 0 and "ctl.q\t0" in listing.stdout
    params = pika.URLParameters(broker.uri_with(user="reader", password="pw"))
    with pika.BlockingConnection(params) as conn:
        ch = conn.channel()
        ch.queue_declare("reader.q")  # configure is allowed
        ch.basic_publish("", "reader.q", b"x")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.queue_declare("reader.q", passive=True)  # the publish's 403 arrives first
    assert info.value.reply_code == 403
    assert info.value.reply_text == ("ACCESS_REFUSED - write access to exchange 'amq.default' "
                                     "in vhost '/' refused for user 'reader'")
    out = tmp_path / "defs.json"
    assert _ctl(http, "export_definitions", str(out)).returncode == 0
    assert any(u["name"] == "reader" for u in json.loads(out.read_text())["users"])
    assert _ctl(http, "delete_user", "reader").returncode == 0
    assert _ctl(http, "import_definitions", str(out)).returncode == 0
    with pika.BlockingConnection(params):  # the user came back from the definitions, password too
        pass
    assert _ctl(http, "purge_queue", "ctl.q").returncode == 0
    assert _ctl(http, "delete_queue", "ctl.q").returncode == 0
    status = _ctl(http, "cluster_status")
    assert status.returncode == 0 and json.loads(status.stdout)["running_nodes"]
    bad = _ctl(http, "delete_vhost", "no-such-vhost")
    assert bad.returncode == 1 and bad.stderr.startswith("Error:")


def test_definitions_and_users_survive_restart(broker_factory, tmp_path):
    broker, http, _ = _start(broker_factory)
    base = f"http://127.0.0.1:{http}/api"
    _api(f"{base}/vhosts/v2", "PUT", {"description": "second"})
    _api(f"{base}/users/kept", "PUT", {"password": "pw", "tags": "monitoring"})
    _api(f"{base}/permissions/v2/kept", "PUT", {"configure": ".*", "write": ".*", "read": ".*"})
    _api(f"{base}/queues/v2/dq", "PUT", {"durable": True})
    broker.stop()
    broker2, http2, _ = _start(broker_factory, data_dir=broker.data_dir)
    base = f"http://127.0.0.1:{http2}/api"
    assert _api(f"{base}/queues/v2/dq")["durable"] is True
    assert _api(f"{base}/whoami", user="kept", password="pw")["tags"] == ["monitoring"]
    with pika.BlockingConnection(pika.URLParameters(broker2.uri_with(user="kept", password="pw",
                                                                     vhost="v2"))):
        pass


needs_chromium = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not "
                                    "installed (interop_tests/setup.sh installs it)")


@contextlib.contextmanager
def _chromium(tmp_path: Path):
    """Debian's headless chromium driven by Playwright's client: a persistent context."""
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=shutil.which("chromium"),
            headless=True, viewport={"width": 1280, "height": 1100},
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync"])
        try:
            yield browser
        finally:
            browser.close()


@needs_chromium
def test_web_page_wrong_password_then_right_one(broker_factory, tmp_path):
    """A wrong password shows "Login failed" (RabbitMQ's management UI's words) and no browser
    dialog; the right one typed afterwards logs in and the overview renders."""
    _, http, _ = _start(broker_factory)
    with _chromium(tmp_path) as browser:
        page = browser.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"http://127.0.0.1:{http}/", timeout=20000)
        page.fill("#username", "guest")
        page.fill("#password", "wrong")
        page.click("#login-button")
        page.locator("#login-error", has_text="Login failed").wait_for(timeout=10000)
        assert page.locator("#main").is_hidden()
        page.fill("#password", "guest")
        page.click("#login-button")
        page.locator("#totals .card", has_text="Queues").wait_for(timeout=10000)
        assert page.locator("#login-box").is_hidden()
        assert page.locator("#who").inner_text() == "user guest"
        assert dialogs == []


@needs_chromium
def test_web_page_in_headless_chromium(broker_factory, tmp_path):
    broker, http, _ = _start(broker_factory)
    with pika.BlockingConnection(pika.URLParameters(broker.uri)) as conn:
        ch = conn.channel()
        ch.queue_declare("page.q")
        for _ in range(7):
            ch.basic_publish("", "page.q", b"x")
        with _chromium(tmp_path) as browser:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{http}/", timeout=20000)
            page.fill("#username", "guest")
            page.fill("#password", "guest")
            page.click("#login-button")
            page.click('nav a[data-tab="queues"]')   # the "Queues and Streams" tab
            row = page.locator('#queues tr[data-queue="page.q"]')
            row.wait_for(timeout=20000)
            assert row.locator(".qmessages").inner_text() == "7"
            page.wait_for_timeout(2500)  # a second poll: the chart has two points
            shot = tmp_path / "management.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10000
            if os.environ.get("AMQP_BROKER_SCREENSHOT_DOCS") == "1":
                docs = Path(REPO_ROOT) / "docs"
                docs.mkdir(exist_ok=True)
                shutil.copy(shot, docs / "management.png")
