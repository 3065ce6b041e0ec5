"""``amqp-client`` end to end, as a subprocess, with its documented exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import ROOT, free_port


def run(uri: str, *args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "clients.cli", "--uri", uri, "--timeout", "10",
                           *args], cwd=ROOT, input=stdin, capture_output=True, timeout=timeout)


def test_issue_example(amqp_uri, name):
    r = run(amqp_uri, "declare-queue", name)
    assert r.returncode == 0 and r.stdout.decode().strip() == name
    r = run(amqp_uri, "publish", "--routing-key", name, stdin=b"a\nb\n")
    assert r.returncode == 0, r.stderr
    assert b"published 2" in r.stdout
    r = run(amqp_uri, "get", name)
    assert (r.returncode, r.stdout) == (0, b"a\n")
    r = run(amqp_uri, "--json", "get", name)
    assert r.returncode == 0 and json.loads(r.stdout)["body"] == "b"
    r = run(amqp_uri, "get", name)
    assert r.returncode == 3 and b"empty" in r.stderr
    run(amqp_uri, "declare-queue", name, "--passive")
    assert run(amqp_uri, "get", name).returncode == 3
    # clean up (a durable=False, non-exclusive queue on a shared broker)
    subprocess.run([sys.executable, "-c", f"""
import anyio
from clients.aio import connect
async def main():
    async with connect({amqp_uri!r}) as c:
        await (await c.channel()).queue_delete({name!r})
anyio.run(main)"""], cwd=ROOT, timeout=30, check=True)


def test_bulk_publish_from_file_with_progress_and_consume(amqp_uri, name, tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(5000)))
    assert run(amqp_uri, "declare-exchange", f"{name}.x", "--type", "topic").returncode == 0
    assert run(amqp_uri, "declare-queue", name, "--auto-delete").returncode == 0
    r = run(amqp_uri, "bind", name, f"{name}.x", "--routing-key", "logs.#")
    assert r.returncode == 0, r.stderr
    r = run(amqp_uri, "--json", "publish", "-e", f"{name}.x", "-r", "logs.app", "--file",
            str(path), "--progress", "--persistent", "--header", "n=1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"published": 5000, "returned": 0, "confirmed": True}
    assert b"100.0%" in r.stderr and b"5000 msgs" in r.stderr
    r = run(amqp_uri, "--json", "consume", name, "--count", "5000", "--idle-timeout", "5")
    lines = r.stdout.decode().splitlines()
    assert r.returncode == 0 and len(lines) == 5000
    first = json.loads(lines[0])
    assert first["body"] == "line 0" and first["properties"]["delivery_mode"] == 2
    assert first["properties"]["headers"] == {"n": 1}
    # the auto-delete queue went with its last consumer
    assert run(amqp_uri, "declare-queue", name, "--passive").returncode == 1


def test_error_exit_codes(amqp_uri, name):
    r = run(amqp_uri, "declare-queue", f"{name}-missing", "--passive")
    assert r.returncode == 1 and b"404" in r.stderr and b"NOT_FOUND" in r.stderr
    r = run(amqp_uri, "--json", "declare-queue", f"{name}-missing", "--passive")
    err = json.loads(r.stderr)
    assert (r.returncode, err["reply_code"], err["exit_code"]) == (1, 404, 1)
    r = run(amqp_uri, "publish", "-r", f"{name}-nowhere", "--mandatory", "--body", "x")
    assert r.returncode == 1 and b"312 NO_ROUTE" in r.stderr
    r = run(amqp_uri, "declare-exchange", f"{name}.bad", "--type", "no-such-type")
    assert r.returncode == 1 and b"503" in r.stderr
    r = run(f"amqp://127.0.0.1:{free_port()}/", "get", "q")
    assert r.returncode == 4 and b"connection failure" in r.stderr
    assert run(amqp_uri, "no-such-command").returncode == 2
    assert run("http://nope/", "get", "q").returncode == 2
    r = run(amqp_uri, "publish", "--file", "/nonexistent/file")
    assert r.returncode == 2


def test_put_and_subscribe(amqp_uri, name, tmp_path):
    common = ["--client-id", name, "--state", str(tmp_path / "s.db"), "--exchange",
              f"{name}.topics"]
    r = run(amqp_uri, "subscribe", "news.*", "--idle-timeout", "0.2", *common)
    assert r.returncode == 0 and r.stdout == b""  # creates the subscription queue
    r = run(amqp_uri, "--json", "put", "news.today", *common, stdin=b"one\ntwo\n")
    assert r.returncode == 0, r.stderr
    ids = json.loads(r.stdout)["message_ids"]
    assert len(ids) == 2
    r = run(amqp_uri, "--json", "subscribe", "news.*", "--count", "2", "--idle-timeout", "5",
            *common)
    got = [json.loads(line) for line in r.stdout.decode().splitlines()]
    assert r.returncode == 0 and [g["body"] for g in got] == ["one", "two"]
    assert [g["properties"]["message_id"] for g in got] == ids
    r = run(amqp_uri, "subscribe", "news.*", "--idle-timeout", "0.3", *common)
    assert r.stdout == b""  # acked: not delivered again


def test_help_lists_exit_codes():
    r = subprocess.run([sys.executable, "-m", "clients.cli", "--help"], cwd=ROOT,
                       capture_output=True, timeout=30)
    assert r.returncode == 0 and b"4 connection failure" in r.stdout
