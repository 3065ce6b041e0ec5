"""The management web page as a user works in it (issue 26): headless Debian chromium driven by
Playwright's client against one shared broker process, every task done through the page (its
tabs Overview, Connections, Channels, Exchanges, Queues and Streams, Admin; a page per queue,
exchange and connection) and checked from outside it (the API, a pika client).

Screenshots of each page are kept as test artifacts in the directory the module prints
("management UI screenshots: ..."); with AMQP_BROKER_SCREENSHOT_DOCS=1 they are also copied to
docs/management-*.png (the README's and docs/management.md's pictures).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import urllib.request
from pathlib import Path

import pika
import pytest

from interop_tests.conftest import REPO_ROOT, _free_port, start_broker

pytestmark = [pytest.mark.interop,
              pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not "
                                 "installed (interop_tests/setup.sh installs it)")]

TIMEOUT_MS = 10000


def _api(http: int, path: str, method: str = "GET", body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{http}/api{path}", method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": "Basic " + base64.b64encode(
                                     b"guest:guest").decode(), "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
        return json.loads(raw) if raw.strip() else None


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    """(broker, http port, a logged-in page, screenshot dir) shared by the module's tests."""
    playwright = pytest.importorskip("playwright.sync_api")
    http = _free_port()
    broker = start_broker(tmp_path_factory.mktemp("ui-broker"), "--management-port", str(http))
    shots = tmp_path_factory.mktemp("management-ui-screenshots")
    print(f"\nmanagement UI screenshots: {shots}")
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium", headless=True,
                args=["--no-sandbox", "--disable-gpu", "--no-first-run",
                      "--disable-background-networking", "--disable-component-update"])
            page = browser.new_page(viewport={"width": 1280, "height": 900},
                                    accept_downloads=True)
            page.set_default_timeout(TIMEOUT_MS)
            page.on("dialog", lambda d: d.accept())   # "Delete queue q?" -> OK
            page.goto(f"http://127.0.0.1:{http}/")
            page.fill("#username", "guest")
            page.fill("#password", "guest")
            page.click("#login-button")
            page.locator("#totals .card", has_text="Queues").wait_for()
            yield broker, http, page, shots
            browser.close()
    finally:
        broker.stop()


def _shot(page, shots: Path, name: str) -> None:
    path = shots / f"management-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 5000
    if os.environ.get("AMQP_BROKER_SCREENSHOT_DOCS") == "1":
        shutil.copy(path, Path(REPO_ROOT) / "docs" / path.name)


def _go(page, hash_: str, ready: str) -> None:
    page.goto(page.url.split("#")[0] + hash_)
    page.locator(ready).first.wait_for()


def _submit(page, form_id: str, values: dict[str, str], said: str = "Done") -> None:
    """Fill the form's fields (inputs and selects by name), submit it, wait for its result."""
    for name, value in values.items():
        field = page.locator(f"#{form_id} [name={name}]")
        if field.evaluate("el => el.tagName") == "SELECT":
            field.select_option(value)
        else:
            field.fill(value)
    page.click(f"#{form_id} button")
    _result(page, form_id, said)


def _result(page, form_id: str, text: str) -> None:
    page.locator(f"#{form_id}-result.ok", has_text=text).wait_for()


def test_overview_shows_members_roles_and_quorum_replicas(ui):
    broker, http, page, shots = ui
    _api(http, "/queues/%2F/ui.qq", "PUT", {"durable": True,
                                              "arguments": {"x-queue-type": "quorum"}})
    node = _api(http, "/overview")["node"]
    _go(page, "#/", "#members tr[data-member]")
    assert page.locator(f'#members tr[data-member="{node}"] .role').inner_text() == "leader"
    row = page.locator('#replicated tr[data-replicated="ui.qq"]')
    row.locator(".qleader", has_text=node).wait_for()   # once its Raft group elected one
    row.locator(".lag", has_text="in sync").wait_for()
    assert f"{node} (leader)" in row.inner_text()
    _shot(page, shots, "overview")


def test_queue_added_published_got_bound_purged_deleted(ui):
    broker, http, page, shots = ui
    _go(page, "#/queues", "#add-queue")
    _submit(page, "add-queue", {"name": "ui.q"})
    page.locator('#queues tr[data-queue="ui.q"] a').click()
    page.locator("#qinfo").wait_for()
    # publish two messages through the page, then get one with ack mode "Automatic ack"
    for text in ("hello from the page", "second"):
        page.fill("#publish textarea[name=payload]", text)
        page.click("#publish button")
        _result(page, "publish", "Message published.")
    assert _api(http, "/queues/%2F/ui.q")["messages"] == 2
    page.select_option("#get select[name=ackmode]", "ack_requeue_false")
    page.click("#get button")
    _result(page, "get", "1 message(s)")
    assert page.locator("#got td.payload").inner_text() == "hello from the page"
    assert _api(http, "/queues/%2F/ui.q")["messages"] == 1
    # "Nack message requeue true" leaves it in the queue, marked redelivered
    page.select_option("#get select[name=ackmode]", "ack_requeue_true")
    page.click("#get button")
    _result(page, "get", "1 message(s)")
    assert _api(http, "/queues/%2F/ui.q")["messages"] == 1
    _submit(page, "add-binding", {"source": "amq.topic", "routing_key": "ui.#"})
    page.locator('#bindings tr[data-binding="amq.topic|ui.#"]').wait_for()
    page.locator("#qrates").wait_for()
    # the queue's message_stats count the page's gets; the page shows their rates
    assert _api(http, "/queues/%2F/ui.q")["message_stats"]["get"] == 2
    assert "Deliver / get" in page.locator("#qinfo").inner_text()
    _shot(page, shots, "queue")
    page.locator('#bindings tr[data-binding="amq.topic|ui.#"] button.unbind').click()
    page.locator('#bindings tr[data-binding="amq.topic|ui.#"]').wait_for(state="detached")
    assert [b["source"] for b in _api(http, "/queues/%2F/ui.q/bindings")] == [""]
    page.click("#purge")
    _result(page, "purge", "Queue purged.")
    assert _api(http, "/queues/%2F/ui.q")["messages"] == 0
    page.click("#delete")
    page.locator("#add-queue").wait_for()
    assert "ui.q" not in [q["name"] for q in _api(http, "/queues")]


def test_exchange_added_bound_published_deleted(ui):
    broker, http, page, shots = ui
    _api(http, "/queues/%2F/ui.xq", "PUT", {"durable": False})
    _go(page, "#/exchanges", "#add-exchange")
    _submit(page, "add-exchange", {"name": "ui.x", "type": "fanout"})
    page.locator('#exchanges tr[data-exchange="ui.x"] a').click()
    page.locator("#xinfo").wait_for()
    assert "fanout" in page.locator("#xinfo").inner_text()
    _submit(page, "add-binding", {"destination": "ui.xq"})
    page.locator('#bindings tr[data-binding="ui.x|"]').wait_for()
    page.fill("#publish textarea[name=payload]", "via the exchange")
    page.click("#publish button")
    _result(page, "publish", "Message published.")
    got = _api(http, "/queues/%2F/ui.xq/get", "POST", {"count": 1, "ackmode": "ack_requeue_false",
                                                      "encoding": "auto"})
    assert [m["payload"] for m in got] == ["via the exchange"]
    # its message rates in and out, where RabbitMQ shows them: the list and the exchange's page
    _go(page, "#/exchanges", '#exchanges tr[data-exchange="ui.x"]')
    rates = page.locator('#exchanges tr[data-exchange="ui.x"] td.num').all_inner_texts()
    assert len(rates) == 2 and all(r.endswith("/s") for r in rates), rates
    page.locator('#exchanges tr[data-exchange="ui.x"] a').click()
    page.locator("#xinfo td.num", has_text="/s").nth(1).wait_for()
    assert page.locator("#xinfo th").all_inner_texts()[-2:] == ["Message rate in",
                                                                "Message rate out"]
    page.locator("#xrates").wait_for()
    _shot(page, shots, "exchange")
    page.click("#delete")
    page.locator("#add-exchange").wait_for()
    assert "ui.x" not in [x["name"] for x in _api(http, "/exchanges")]


def test_connection_page_lists_channels_and_closes_it(ui):
    broker, http, page, shots = ui
    conn = pika.BlockingConnection(pika.URLParameters(broker.uri))
    try:
        conn.channel().confirm_delivery()
        name = _api(http, "/connections")[0]["name"]
        _go(page, "#/connections", f'#connections tr[data-connection="{name}"]')
        page.locator(f'#connections tr[data-connection="{name}"] a').click()
        page.locator("#channels tr[data-channel]").wait_for()
        assert page.locator("#channels tr[data-channel]").count() == 1
        _shot(page, shots, "connection")
        page.fill("#close input[name=reason]", "maintenance")
        page.click("#close button")
        _result(page, "close", "Connection closed.")
        with pytest.raises(pika.exceptions.ConnectionClosed) as closed:
            conn.process_data_events(time_limit=5)
            conn.channel()
        assert closed.value.reply_code == 320
        assert "maintenance" in closed.value.reply_text
    finally:
        if conn.is_open:
            conn.close()


def test_admin_users_vhosts_permissions_policies_definitions(ui, tmp_path):
    broker, http, page, shots = ui
    _go(page, "#/admin", "#user-list")
    _submit(page, "add-user", {"name": "ui.alice", "password": "s3cret", "tags": "management"})
    _submit(page, "add-vhost", {"name": "ui.vh"})
    _submit(page, "set-permission", {"user": "ui.alice", "vhost": "ui.vh", "write": "^ui"})
    _submit(page, "add-policy", {"name": "ui.cap", "pattern": "^ui\\.", "apply-to": "queues",
                                 "definition": '{"max-length": 5}'})
    page.locator('#permission-list tr[data-permission="ui.alice|ui.vh"]').wait_for()
    page.locator('#policy-list tr[data-policy="ui.cap"]').wait_for()
    assert _api(http, "/permissions/ui.vh/ui.alice")["write"] == "^ui"
    assert _api(http, "/policies/%2F/ui.cap")["definition"] == {"max-length": 5}
    # the user logs in over AMQP with the password typed in the page
    pika.BlockingConnection(pika.URLParameters(
        f"amqp://ui.alice:s3cret@127.0.0.1:{broker.port}/ui.vh")).close()
    with page.expect_download() as download:
        page.click("#export")
    exported = json.loads(Path(download.value.path()).read_text())
    assert "ui.alice" in [u["name"] for u in exported["users"]]
    _shot(page, shots, "admin")
    upload = tmp_path / "definitions.json"
    upload.write_text(json.dumps({"queues": [{"name": "ui.imported", "vhost": "/",
                                              "durable": True, "auto_delete": False,
                                              "arguments": {}}]}))
    page.set_input_files("#import input[name=file]", str(upload))
    page.click("#import button")
    _result(page, "import", "Definitions imported.")
    assert "ui.imported" in [q["name"] for q in _api(http, "/queues")]
