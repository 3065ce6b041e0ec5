"""``amqp-client``: command-line access to a broker (ours or any AMQP 0-9-1 broker).

Subcommands: publish, consume, get, declare-queue, declare-exchange, bind, put, subscribe; run
``amqp-client SUBCOMMAND --help`` for each. ``--uri`` may be repeated (failover, tried in order;
default ``$AMQP_URI`` or ``amqp://guest:guest@127.0.0.1:5672/``). ``--json`` prints one JSON object
per line on stdout (and errors as JSON on stderr). Bulk publish reads one message per line from
``--file`` or stdin, with publisher confirms, and draws a progress bar on stderr when stderr is a
terminal (``--progress`` forces it).

Exit codes (stable, for scripts):
  0  success
  1  the broker refused: channel or connection error (message shows its reply code and text),
     nacked or returned (unroutable mandatory) message, or a timeout waiting for a reply
  2  usage error (bad arguments or URI)
  3  ``get``: the queue was empty
  4  connection failure: no broker reachable, or the connection dropped
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio

from .aio import connect
from .errors import (
    ChannelClosed,
    ConnectionClosed,
    MessageReturned,
    NoBrokerAvailable,
    PublishNacked,
)
from .message import Message, Properties, encode_properties

__all__ = ["main", "build_parser", "EXIT_OK", "EXIT_BROKER", "EXIT_USAGE", "EXIT_EMPTY",
           "EXIT_CONNECTION"]

EXIT_OK, EXIT_BROKER, EXIT_USAGE, EXIT_EMPTY, EXIT_CONNECTION = 0, 1, 2, 3, 4
DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/"


class _Usage(Exception):
    pass


def _kv(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for documentation and tests)."""
    p = argparse.ArgumentParser(prog="amqp-client", description=__doc__.split("\n\n")[0],
                                epilog="exit codes: 0 ok, 1 broker/channel error, 2 usage, "
                                       "3 queue empty (get), 4 connection failure",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--uri", action="append", metavar="URI",
                   help="broker URI, repeatable for failover (default $AMQP_URI or "
                        f"{DEFAULT_URI})")
    p.add_argument("--json", action="store_true", help="JSON lines on stdout")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds to wait for each broker reply (default 30)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def args_opt(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--arg", type=_kv, action="append", default=[], metavar="KEY=VALUE",
                        help="x-argument (VALUE parsed as JSON when it can be)")

    sp = sub.add_parser("publish", help="publish messages (one per line from --file or stdin)")
    sp.add_argument("--exchange", "-e", default="", help="exchange (default: the default one)")
    sp.add_argument("--routing-key", "-r", default="", help="routing key")
    sp.add_argument("--body", "-b", help="publish this one message instead of reading lines")
    sp.add_argument("--file", "-f", type=Path, help="read messages from FILE, one per line")
    sp.add_argument("--no-confirm", action="store_true", help="do not use publisher confirms")
    sp.add_argument("--mandatory", action="store_true",
                    help="ask for unroutable messages back (exit 1 if any)")
    sp.add_argument("--persistent", action="store_true", help="delivery_mode 2")
    sp.add_argument("--content-type")
    sp.add_argument("--message-id")
    sp.add_argument("--header", type=_kv, action="append", default=[], metavar="KEY=VALUE")
    sp.add_argument("--progress", action="store_true", default=None,
                    help="progress bar on stderr even when it is not a terminal")
    sp.add_argument("--no-progress", action="store_false", dest="progress")

    sp = sub.add_parser("consume", help="consume from a queue and print each message")
    sp.add_argument("queue")
    sp.add_argument("--count", "-n", type=int, help="stop after N messages")
    sp.add_argument("--idle-timeout", type=float,
                    help="stop when no message came for this many seconds")
    sp.add_argument("--no-ack", action="store_true", help="auto-ack (no_ack=True)")
    sp.add_argument("--prefetch", type=int, default=100)

    sp = sub.add_parser("get", help="get one message (exit 3 when the queue is empty)")
    sp.add_argument("queue")
    sp.add_argument("--requeue", action="store_true", help="put it back instead of acking")

    sp = sub.add_parser("declare-queue", help="declare a queue (prints its name)")
    sp.add_argument("queue", nargs="?", default="", help="name ('' for a server-named queue)")
    for flag in ("--durable", "--exclusive", "--auto-delete", "--passive"):
        sp.add_argument(flag, action="store_true")
    args_opt(sp)

    sp = sub.add_parser("declare-exchange", help="declare an exchange")
    sp.add_argument("exchange")
    sp.add_argument("--type", "-t", default="direct",
                    help="direct, fanout, topic, headers (default direct)")
    for flag in ("--durable", "--auto-delete", "--internal", "--passive"):
        sp.add_argument(flag, action="store_true")
    args_opt(sp)

    sp = sub.add_parser("bind", help="bind a queue (or with --to-exchange an exchange) to an "
                                     "exchange")
    sp.add_argument("destination", help="queue (or exchange) receiving the messages")
    sp.add_argument("exchange", help="source exchange")
    sp.add_argument("--routing-key", "-r", default="")
    sp.add_argument("--to-exchange", action="store_true", help="destination is an exchange")
    args_opt(sp)

    for name, helptext in (("put", "exactly-once put to a topic (one per line from stdin "
                                   "when BODY is absent)"),
                           ("subscribe", "subscribe to a topic and print messages")):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("topic")
        if name == "put":
            sp.add_argument("body", nargs="?")
        else:
            sp.add_argument("--count", "-n", type=int, help="stop after N messages")
            sp.add_argument("--idle-timeout", type=float,
                            help="stop when no message came for this many seconds")
        sp.add_argument("--client-id", default=os.environ.get("AMQP_CLIENT_ID", "cli"),
                        help="subscriber / publisher id (default $AMQP_CLIENT_ID or 'cli')")
        sp.add_argument("--state", type=Path,
                        help="in-flight log (default ~/.amqp-client/<client-id>.sqlite3)")
        sp.add_argument("--exchange", default="reliable.topics")
    return p


class _Out:
    def __init__(self, as_json: bool) -> None:
        self.json = as_json

    def message(self, msg: Message) -> None:
        if self.json:
            print(json.dumps({
                "body": msg.body.decode("utf-8", "backslashreplace"), "exchange": msg.exchange,
                "routing_key": msg.routing_key, "redelivered": msg.redelivered,
                "delivery_tag": msg.delivery_tag, "properties": msg.properties.as_dict(),
                **({"message_count": msg.message_count} if msg.kind == "get" else {}),
            }, default=str), flush=True)
        else:
            sys.stdout.buffer.write(msg.body + b"\n")
            sys.stdout.flush()

    def result(self, text: str, **fields: Any) -> None:
        print(json.dumps(fields) if self.json else text, flush=True)


class _Progress:
    def __init__(self, enabled: bool, total_bytes: int | None) -> None:
        self.enabled = enabled
        self.total = total_bytes
        self.start = time.monotonic()
        self.last = 0.0

    def update(self, count: int, done_bytes: int, final: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not final and now - self.last < 0.1:
            return
        self.last = now
        rate = count / max(now - self.start, 1e-6)
        if self.total:
            frac = min(done_bytes / self.total, 1.0)
            bar = "#" * int(frac * 30)
            line = f"[{bar:<30}] {frac * 100:5.1f}% {count} msgs {rate:,.0f} msg/s"
        else:
            line = f"{count} msgs {rate:,.0f} msg/s"
        sys.stderr.write("\r" + line + ("\n" if final else ""))
        sys.stderr.flush()


def _lines(stream: IO[bytes]) -> Iterator[tuple[bytes, int]]:
    for raw in stream:
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        yield line, len(raw)


async def _publish(conn: Any, a: argparse.Namespace, out: _Out) -> int:
    ch = await conn.channel(confirm=not a.no_confirm)
    props = Properties(content_type=a.content_type, message_id=a.message_id,
                       delivery_mode=2 if a.persistent else None,
                       headers=dict(a.header) or None)
    raw = encode_properties(props)
    returned: list[Message] = []
    count = 0
    if a.body is not None:
        try:
            await ch.basic_publish(a.body.encode(), a.exchange, a.routing_key, props,
                                   mandatory=a.mandatory)
        except MessageReturned as exc:
            returned.append(exc.message)  # type: ignore[arg-type]
        count = 1
    else:
        if a.file is not None:
            try:
                stream: IO[bytes] = open(a.file, "rb")  # noqa: SIM115
            except OSError as exc:
                raise _Usage(f"cannot read {a.file}: {exc.strerror}") from None
            total: int | None = os.path.getsize(a.file)
        else:
            stream, total = sys.stdin.buffer, None
        show = a.progress if a.progress is not None else sys.stderr.isatty()
        progress = _Progress(show, total)
        done = 0
        with stream:
            for body, size in _lines(stream):
                ch.publish_nowait(body, a.exchange, a.routing_key, mandatory=a.mandatory,
                                  props_raw=raw)
                count += 1
                done += size
                if count % 1000 == 0:
                    await conn.drain()
                    if ch.confirm_mode:
                        returned += await ch.wait_for_confirms()
                    progress.update(count, done)
        await conn.drain()
        if ch.confirm_mode:
            returned += await ch.wait_for_confirms()
        progress.update(count, done, final=True)
    if a.no_confirm:
        await anyio.sleep(0.05)  # returns for unconfirmed mandatory messages
    out.result(f"published {count} message(s)" + (f", {len(returned)} returned"
                                                   if returned else ""),
               published=count, returned=len(returned), confirmed=not a.no_confirm)
    if returned:
        r = returned[0]
        print(f"amqp-client: {len(returned)} message(s) returned: {r.reply_code} {r.reply_text}",
              file=sys.stderr)
        return EXIT_BROKER
    return EXIT_OK


async def _consume_loop(source: Any, count: int | None, idle: float | None, out: _Out,
                        on_message: Any) -> int:
    got = 0
    while count is None or got < count:
        msg = await source(idle)
        if msg is None:
            break
        out.message(msg)
        got += 1
        await on_message(msg)
    return got


async def _run(a: argparse.Namespace, out: _Out) -> int:
    uris = a.uri or [os.environ.get("AMQP_URI", DEFAULT_URI)]
    cmd = a.command
    long_running = cmd in ("consume", "subscribe")
    kwargs = dict(reconnect=long_running, operation_timeout=a.timeout)
    if cmd in ("put", "subscribe"):
        from .reliable import ReliableClient
        state = a.state or Path.home() / ".amqp-client" / f"{a.client_id}.sqlite3"
        state.parent.mkdir(parents=True, exist_ok=True)
        async with ReliableClient(uris, client_id=a.client_id, state_path=state,
                                  exchange=a.exchange, put_timeout=a.timeout, **kwargs) as rc:
            if cmd == "put":
                bodies = ([a.body.encode()] if a.body is not None
                          else [line for line, _ in _lines(sys.stdin.buffer)])
                ids = [await rc.put(a.topic, body) for body in bodies]
                out.result("\n".join(ids), message_ids=ids, resumed=rc.resumed)
                return EXIT_OK
            sub = await rc.subscribe(a.topic)
            async with sub:
                async def nothing(_: Message) -> None:
                    return None
                await _consume_loop(sub.next, a.count, a.idle_timeout, out, nothing)
            return EXIT_OK
    async with connect(uris, **kwargs) as conn:
        if cmd == "publish":
            return await _publish(conn, a, out)
        ch = await conn.channel()
        if cmd == "get":
            msg = await ch.basic_get(a.queue)
            if msg is None:
                if out.json:
                    out.result("", empty=True, queue=a.queue)
                print(f"amqp-client: queue {a.queue!r} is empty", file=sys.stderr)
                return EXIT_EMPTY
            out.message(msg)
            await (msg.nack(requeue=True) if a.requeue else msg.ack())
            await ch.close()
            return EXIT_OK
        if cmd == "consume":
            await ch.basic_qos(a.prefetch)
            consumer = await ch.basic_consume(a.queue, no_ack=a.no_ack)

            async def ack(msg: Message) -> None:
                if not a.no_ack:
                    await msg.ack()
            async with consumer:
                await _consume_loop(consumer.get, a.count, a.idle_timeout, out, ack)
            await ch.close()
            return EXIT_OK
        if cmd == "declare-queue":
            ok = await ch.queue_declare(a.queue, passive=a.passive, durable=a.durable,
                                        exclusive=a.exclusive, auto_delete=a.auto_delete,
                                        arguments=dict(a.arg) or None)
            # pamqp types every argument Optional (its constructors' default); a decoded
            # Declare-Ok always names the queue
            out.result(ok.queue, queue=ok.queue,  # type: ignore[arg-type]
                       message_count=ok.message_count,
                       consumer_count=ok.consumer_count)
        elif cmd == "declare-exchange":
            await ch.exchange_declare(a.exchange, a.type, passive=a.passive, durable=a.durable,
                                      auto_delete=a.auto_delete, internal=a.internal,
                                      arguments=dict(a.arg) or None)
            out.result(a.exchange, exchange=a.exchange, type=a.type)
        elif cmd == "bind":
            bind = ch.exchange_bind if a.to_exchange else ch.queue_bind
            await bind(a.destination, a.exchange, a.routing_key, arguments=dict(a.arg) or None)
            out.result(f"bound {a.destination} to {a.exchange} with {a.routing_key!r}",
                       destination=a.destination, exchange=a.exchange, routing_key=a.routing_key)
        await ch.close()
        return EXIT_OK


def _error(out: _Out, code: int, text: str, **fields: Any) -> int:
    if out.json:
        print(json.dumps({"error": text, "exit_code": code, **fields}), file=sys.stderr)
    else:
        print(f"amqp-client: {text}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (see the module docstring)."""
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    out = _Out(a.json)
    try:
        return anyio.run(_run, a, out)
    except _Usage as exc:
        return _error(out, EXIT_USAGE, str(exc))
    except ValueError as exc:
        return _error(out, EXIT_USAGE, f"invalid argument: {exc}")
    except NoBrokerAvailable as exc:
        return _error(out, EXIT_CONNECTION, f"connection failure: {exc.reply_text}")
    except (ChannelClosed, ConnectionClosed) as exc:
        kind = "channel" if isinstance(exc, ChannelClosed) else "connection"
        code = EXIT_CONNECTION if exc.reply_code == 0 else EXIT_BROKER
        return _error(out, code, f"{kind} error: {exc}", reply_code=exc.reply_code,
                      reply_text=exc.reply_text, class_id=exc.class_id,
                      method_id=exc.method_id)
    except PublishNacked as exc:
        return _error(out, EXIT_BROKER, str(exc))
    except MessageReturned as exc:
        return _error(out, EXIT_BROKER, f"message returned: {exc}")
    except TimeoutError:
        return _error(out, EXIT_BROKER, f"timed out after {a.timeout} s waiting for the broker")
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
