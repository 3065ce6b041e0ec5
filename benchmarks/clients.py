"""Python AMQP clients side by side (issue 3): our client against pika and aio-pika.

``python -m benchmarks.clients`` from the repository root (in the project's venv, which has pika,
aio-pika and trio) starts our broker (``python -m amqp_broker``) and a private RabbitMQ node with
the helpers of ``benchmarks/processes.py``, runs every case below for each client against both
brokers (one right after the other, alternating which broker goes first), prints a markdown table
and appends it to ``benchmarks/RESULTS.md`` as a new "Python clients (issue 3)" section
(``--no-write`` to only print; ``-n`` to change the message count, default 50,000).

Clients: ``ours/asyncio`` (``clients.aio.connect`` under ``anyio.run(backend="asyncio")``),
``ours/trio`` (the same code under ``anyio.run(backend="trio")``), ``pika`` (``BlockingConnection``)
and ``aio-pika`` (``aio_pika.connect``). Each run is a fresh subprocess of this module
(``--worker``) with one connection; the broker gets a fresh non-durable queue per run; messages
have a 1 KiB body, no properties, the default exchange. msg/s = N / elapsed, where elapsed is:

1. ``publish``: from the first publish until a passive Queue.Declare (polled every 5 ms on a second
   channel) reports all N messages in the queue. Ours: ``publish_batch`` of the N bodies (flow
   control on the client's write buffer); pika: ``basic_publish`` in a loop; aio-pika:
   ``await default_exchange.publish(Message(body))`` in a loop.
2. ``publish+confirm``: publishing N on a confirm-mode channel until every publish is acked, in
   windows of 1000 (write 1000, wait for their 1000 confirms, next window). Ours:
   ``publish_batch`` + ``wait_confirmations``; aio-pika: ``asyncio.gather`` of 1000
   ``publish`` calls; pika's ``BlockingConnection`` can only wait for each confirm before the next
   publish (``confirm_delivery()``), so its row is per-message confirms, not windows.
3. ``consume``: N messages pre-loaded (not timed) are consumed with manual acks, prefetch 1000,
   acking ``multiple`` every 250th delivery and the last one; from Basic.Consume until the N-th
   message is received and its ack written. Ours: ``basic_consume`` iterator + ``message.ack``;
   pika: ``basic_consume`` callback + ``start_consuming``; aio-pika: ``queue.iterator()``.

The machine's cores are shared by the broker, the client and whatever else runs: compare the
clients within one run, not absolute figures across runs. Every process started here is stopped
in a ``finally`` and every wait is bounded.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import itertools
import json
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from benchmarks.processes import HOST, REPO_ROOT, Broker, OurBroker, RabbitMQ, stop_brokers, tail

RESULTS_MD = REPO_ROOT / "benchmarks" / "RESULTS.md"
BODY = b"x" * 1024
WINDOW = 1000
PREFETCH = 1000
ACK_EVERY = 250
POLL = 0.005
RUN_TIMEOUT = 180.0  # seconds per worker subprocess

CLIENTS = ["ours/asyncio", "ours/trio", "pika", "aio-pika"]
CASES = ["publish", "publish+confirm", "consume"]


# ---------------------------------------------------------------------------- workers
async def _ours(case: str, port: int, queue: str, n: int) -> float:
    import anyio

    from clients.aio import connect

    url = f"amqp://guest:guest@{HOST}:{port}/"
    async with connect(url, reconnect=False, operation_timeout=120) as conn:
        if case == "consume":
            ch = await conn.channel(prefetch=PREFETCH)
            count = 0
            t0 = time.perf_counter()
            consumer = await ch.basic_consume(queue)
            async for msg in consumer:
                count += 1
                if count % ACK_EVERY == 0 or count == n:
                    await msg.ack(multiple=True)
                    if count == n:
                        break
            await conn.drain()
            elapsed = time.perf_counter() - t0
            await consumer.cancel()
            return elapsed
        confirm = case == "publish+confirm"
        ch = await conn.channel(confirm=confirm)
        probe = await conn.channel()
        t0 = time.perf_counter()
        if confirm:
            for start in range(0, n, WINDOW):
                confs = await ch.publish_batch(
                    itertools.repeat(BODY, min(WINDOW, n - start)), routing_key=queue
                )
                await ch.wait_confirmations(confs)
        else:
            await ch.publish_batch(itertools.repeat(BODY, n), routing_key=queue)
            while (await probe.queue_declare(queue, passive=True)).message_count < n:
                await anyio.sleep(POLL)
        return time.perf_counter() - t0


def _pika(case: str, port: int, queue: str, n: int) -> float:
    import pika

    params = pika.ConnectionParameters(
        host=HOST, port=port, credentials=pika.PlainCredentials("guest", "guest")
    )
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        if case == "consume":
            ch.basic_qos(prefetch_count=PREFETCH)
            count = 0

            def on_message(chan, method, _props, _body) -> None:
                nonlocal count
                count += 1
                if count % ACK_EVERY == 0 or count == n:
                    chan.basic_ack(method.delivery_tag, multiple=True)
                    if count == n:
                        chan.stop_consuming()

            t0 = time.perf_counter()
            ch.basic_consume(queue, on_message)
            ch.start_consuming()
            return time.perf_counter() - t0
        if case == "publish+confirm":
            ch.confirm_delivery()  # BlockingChannel: each basic_publish waits for its confirm
        publish = ch.basic_publish
        t0 = time.perf_counter()
        for _ in range(n):
            publish("", queue, BODY)
        if case == "publish":
            while ch.queue_declare(queue, passive=True).method.message_count < n:
                time.sleep(POLL)
        return time.perf_counter() - t0
    finally:
        conn.close()


async def _aio_pika(case: str, port: int, queue: str, n: int) -> float:
    import asyncio

    import aio_pika

    conn = await aio_pika.connect(f"amqp://guest:guest@{HOST}:{port}/")
    try:
        if case == "consume":
            ch = await conn.channel()
            await ch.set_qos(prefetch_count=PREFETCH)
            q = await ch.declare_queue(queue, passive=True)
            count = 0
            t0 = time.perf_counter()
            async with q.iterator() as it:
                async for msg in it:
                    count += 1
                    if count % ACK_EVERY == 0 or count == n:
                        await msg.ack(multiple=True)
                        if count == n:
                            t_last = time.perf_counter()  # before the iterator's Basic.Cancel
                            break
            return t_last - t0
        confirm = case == "publish+confirm"
        ch = await conn.channel(publisher_confirms=confirm)
        probe = await conn.channel()
        ex = ch.default_exchange
        Message = aio_pika.Message
        t0 = time.perf_counter()
        if confirm:
            for start in range(0, n, WINDOW):
                await asyncio.gather(
                    *(ex.publish(Message(BODY), routing_key=queue)
                      for _ in range(min(WINDOW, n - start)))
                )
        else:
            for _ in range(n):
                await ex.publish(Message(BODY), routing_key=queue)
            while (await probe.declare_queue(queue, passive=True)).declaration_result.message_count < n:
                await asyncio.sleep(POLL)
        return time.perf_counter() - t0
    finally:
        await conn.close()


def worker(client: str, case: str, port: int, queue: str, n: int) -> float:
    """Run one measurement in this process; returns the elapsed seconds."""
    if client.startswith("ours/"):
        import anyio

        backend = client.split("/", 1)[1]
        return anyio.run(_ours, case, port, queue, n, backend=backend)
    if client == "pika":
        return _pika(case, port, queue, n)
    if client == "aio-pika":
        import asyncio

        return asyncio.run(_aio_pika(case, port, queue, n))
    raise ValueError(f"unknown client {client!r}")


# ------------------------------------------------------------------------ orchestration
async def _admin(port: int, action: str, queue: str, n: int) -> int:
    """Declare/preload/delete a queue with our client (not timed); returns its message count."""
    from clients.aio import connect

    async with connect(f"amqp://guest:guest@{HOST}:{port}/", reconnect=False,
                       operation_timeout=120) as conn:
        ch = await conn.channel(confirm=True)
        if action == "declare":
            await ch.queue_declare(queue)
        elif action == "preload":
            await ch.queue_declare(queue)
            for start in range(0, n, 5000):
                confs = await ch.publish_batch(
                    itertools.repeat(BODY, min(5000, n - start)), routing_key=queue
                )
                await ch.wait_confirmations(confs)
        elif action == "delete":
            return await ch.queue_delete(queue)
        return (await ch.queue_declare(queue, passive=True)).message_count


def admin(port: int, action: str, queue: str, n: int = 0) -> int:
    import anyio

    return anyio.run(_admin, port, action, queue, n, backend="asyncio")


def run_one(client: str, case: str, broker: Broker, n: int) -> tuple[float | None, str]:
    """One measurement in a subprocess; (msg/s, '') or (None, error)."""
    queue = f"bench-{uuid.uuid4().hex[:10]}"
    try:
        if case == "consume":
            have = admin(broker.port, "preload", queue, n)
            if have != n:
                return None, f"preload left {have} messages, not {n}"
        else:
            admin(broker.port, "declare", queue)
        cmd = [sys.executable, "-m", "benchmarks.clients", "--worker", client, case,
               str(broker.port), queue, str(n)]
        try:
            proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True,
                                  timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {RUN_TIMEOUT:.0f} s"
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return None, f"exit {proc.returncode}: {last}"
        elapsed = json.loads(proc.stdout.strip().splitlines()[-1])["elapsed"]
        left = admin(broker.port, "delete", queue)
        if case == "publish" and left < n:
            return None, f"only {left} of {n} messages arrived"
        if case == "consume" and left:
            return None, f"{left} messages left unconsumed"
        return n / elapsed, ""
    except Exception as exc:  # a failed admin step: report it, go on with the next run
        try:
            admin(broker.port, "delete", queue)
        except Exception:
            pass
        return None, f"{type(exc).__name__}: {exc}"


def fmt(rate: float | None) -> str:
    return "failed" if rate is None else f"{rate:,.0f}"


CASE_LABEL = {
    "publish": "publish, no confirms",
    "publish+confirm": "publish, confirms (windows of 1000)",
    "consume": "consume, manual ack (prefetch 1000, multiple every 250)",
}


def case_label(client: str, case: str) -> str:
    if case == "publish+confirm" and client == "pika":
        return "publish, confirms (**per message**: BlockingConnection waits for each)"
    return CASE_LABEL[case]


def table(results: dict, labels: list[str]) -> str:
    head = "| client | case | " + " | ".join(f"{b} msg/s" for b in labels) + " |"
    sep = "|---|---|" + "---:|" * len(labels)
    rows = [head, sep]
    for case in CASES:
        for client in CLIENTS:
            cells = [fmt(results.get((client, case, b), (None, "not run"))[0]) for b in labels]
            rows.append(f"| {client} | {case_label(client, case)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def leaders(results: dict, labels: list[str]) -> list[str]:
    out = []
    for case in CASES:
        for b in labels:
            rates = {c: results.get((c, case, b), (None, ""))[0] for c in CLIENTS}
            ok = {c: r for c, r in rates.items() if r}
            if ok:
                best = max(ok, key=ok.get)
                out.append(f"{case} on {b}: fastest {best} ({ok[best]:,.0f} msg/s)")
    return out


def versions(rabbit: RabbitMQ | None) -> str:
    def v(p: str) -> str:
        try:
            return importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, timeout=10).stdout.strip() or "?"
    import os
    import platform

    rmq = f"RabbitMQ {rabbit.version} (Erlang {rabbit.erlang})" if rabbit else "RabbitMQ: not run"
    return (f"Python {platform.python_version()}, pika {v('pika')}, aio-pika {v('aio-pika')} "
            f"(aiormq {v('aiormq')}), anyio {v('anyio')}, trio {v('trio')}; {rmq}; our broker "
            f"and client at commit {commit}; {os.cpu_count()} CPUs, Linux {platform.release()}")


def append_results(section: str) -> None:
    text = RESULTS_MD.read_text() if RESULTS_MD.exists() else ""  # re-read right before writing
    if text and not text.endswith("\n"):
        text += "\n"
    RESULTS_MD.write_text(text + ("\n" if text else "") + section)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        client, case, port, queue, n = argv[1:6]
        elapsed = worker(client, case, int(port), queue, int(n))
        print(json.dumps({"elapsed": elapsed}))
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.clients", description=__doc__
                                     .split("\n")[0])
    parser.add_argument("-n", type=int, default=50_000, help="messages per run (default 50,000)")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--no-rabbitmq", action="store_true")
    parser.add_argument("--no-write", action="store_true", help="do not append to RESULTS.md")
    args = parser.parse_args(argv)
    clients = [c for c in args.clients.split(",") if c]
    cases = [c for c in args.cases.split(",") if c]
    signal.signal(signal.SIGTERM, _terminate)

    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="amqbench-clients-"))
    ours = OurBroker(workdir, [])
    rabbit: RabbitMQ | None = None
    results: dict[tuple[str, str, str], tuple[float | None, str]] = {}
    notes: list[str] = []
    try:
        ours.start()
        print(f"our broker: pid {ours.proc.pid}, port {ours.port}", flush=True)
        brokers: list[Broker] = [ours]
        if not args.no_rabbitmq:
            candidate = RabbitMQ()
            if candidate.installed():
                rabbit = candidate
                print(f"starting RabbitMQ node {rabbit.node} ...", flush=True)
                try:
                    rabbit.start()
                    print(f"RabbitMQ {rabbit.version}: port {rabbit.port}", flush=True)
                    brokers.append(rabbit)
                except RuntimeError as exc:
                    notes.append(f"RabbitMQ could not start: {str(exc).splitlines()[0]}")
                    rabbit.stop()
                    rabbit = None
            else:
                notes.append("RabbitMQ is not installed: our broker only")
        labels = [b.label for b in brokers]
        info = versions(rabbit)
        i = 0
        for case in cases:
            for client in clients:
                order = brokers if i % 2 == 0 else brokers[::-1]
                i += 1
                for broker in order:
                    if not broker.alive():
                        if broker is ours:
                            notes.append(f"our broker had exited; restarted before {client} "
                                         f"{case}:\n{tail(ours.log_path, 5)}")
                            ours.stop()
                            ours.start()
                        else:
                            results[(client, case, broker.label)] = (None, "broker not running")
                            continue
                    print(f"{client:13} {case:16} {broker.label:9}", end=" ", flush=True)
                    rate, err = run_one(client, case, broker, args.n)
                    results[(client, case, broker.label)] = (rate, err)
                    if err:
                        notes.append(f"{client}, {case}, {broker.label}: {err}")
                    print(fmt(rate) + " msg/s" + (f"  ({err})" if err else ""), flush=True)
        runtime = time.monotonic() - started
        md = table({k: v for k, v in results.items()}, labels)
        lead = leaders(results, labels)
        print()
        print(md)
        print("\n" + "\n".join(lead))
        print(f"\ntotal {runtime:.0f} s")
        if not args.no_write:
            date = dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
            section = (
                f"## Python clients (issue 3), run of {date}\n\n"
                f"`python -m benchmarks.clients` (N = {args.n:,} messages of 1 KiB per run, one "
                f"connection, a fresh non-durable queue per run; msg/s = N / elapsed; the two "
                f"brokers alternate going first). {info}.\n\n"
                f"{md}\n\n"
                "Cases: **publish** is timed from the first publish until a passive "
                "Queue.Declare reports all N messages in the queue; **confirms** writes 1000 "
                "messages, waits for their 1000 acks, and so on (pika's BlockingConnection can "
                "only wait for each confirm before the next publish, so its figure is "
                "per-message confirms and not comparable with the windowed ones); **consume** "
                "reads N pre-loaded messages with manual acks (prefetch 1000, ack multiple "
                "every 250th and the last), timed from Basic.Consume to the last ack written. "
                "Our client publishes with `publish_batch` (+ `wait_confirmations`), pika with "
                "`basic_publish` in a loop, aio-pika with `default_exchange.publish` (awaited "
                "in a loop, or `asyncio.gather` of a window). Each run is its own subprocess. "
                "Both brokers, the client and the benchmark share the machine's cores: compare "
                "within this run.\n\n"
                + "Fastest per case and broker: " + "; ".join(lead) + f". Total runtime "
                f"{runtime:.0f} s.\n"
                + ("\nNotes:\n" + "\n".join(f"- {x}" for x in notes) + "\n" if notes else "")
            )
            append_results(section)
            print(f"appended to {RESULTS_MD.relative_to(REPO_ROOT)}")
        return 0
    finally:
        stop_brokers(ours, rabbit, workdir)


if __name__ == "__main__":
    sys.exit(main())
