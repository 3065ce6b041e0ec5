"""Larger than RAM (issue 4): the broker's RSS while it holds a backlog of persistent messages.

Starts our broker (``python -m amqp_broker``, free port, temp data dir unless ``--data-dir``),
publishes ``--count`` persistent messages of ``--size`` bytes to one durable queue with no consumer
(a raw-socket publisher: pre-encoded frames in large writes, so the client is never the
bottleneck), waits until the queue reports them all, and reads the broker's RSS (now and peak,
``/proc/<pid>/status`` VmRSS / VmHWM). Then, unless ``--no-restart``, stops the broker (SIGTERM),
starts it again on the same data and measures recovery time and RSS; unless ``--no-consume``,
drains the queue with one no-ack consumer, checking every body (each carries its sequence number)
and the order, and reports the peak RSS while draining. Prints a report and, with ``--markdown``,
a markdown section to append to ``benchmarks/RESULTS.md``. The temp dir (data, broker log) is
removed at the end unless ``--keep`` or ``--data-dir``.

``--queue-type quorum`` or ``stream`` (issue 25) declares the queue with that ``x-queue-type``
(a quorum queue of one member, a stream on one broker): bodies live in the Raft log / the
stream's segments, and the RSS per message is what the queue keeps in memory for each. A quorum
queue is drained as a classic one (no-ack); a stream with manual acks, prefetch 1,000 and
``x-stream-offset: first`` (RabbitMQ's rules for stream consumers), and it keeps its messages
after the drain (the check is then every body in order, not an empty queue).

Usage (a few minutes for the default 2 million 1 KiB messages; not part of the test suite)::

    python -m benchmarks.backlog
    python -m benchmarks.backlog --count 200000 --our-args "--queue-memory-budget 1048576"
    python -m benchmarks.backlog --queue-type quorum --count 10000000

Sources: issue 4 ("A backlog of 2 million 1 KiB persistent messages keeps the broker's RSS under
500 MB"); AMQP 0-9-1 §2.3.5 / §4.2.3 (frame layout).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from pamqp import commands
from pamqp import frame as pframe
from pamqp.exceptions import UnmarshalingException

from benchmarks.processes import HOST, REPO_ROOT, free_port, stop_process, tail, wait_for_port

QUEUE = "backlog"
FRAME_END = b"\xce"
_FRAME_HEAD = struct.Struct(">BHI")
BATCH = 2000  # messages per socket write
STREAM_PREFETCH = 1000   # a stream consumer's prefetch (RabbitMQ requires one)
_DELIVER = struct.pack(">HH", 60, 60)


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of ``pid`` in bytes, from /proc (empty when unavailable)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def mib(n: float) -> str:
    """Bytes as MiB with one decimal."""
    return f"{n / 2**20:.1f} MiB"


class RawClient:
    """Just enough AMQP 0-9-1 over a socket for this benchmark: handshake as guest, channel 1,
    Queue.Declare, raw frame writes, and a frame reader (methods decoded with pamqp)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(commands.Connection.Start)
        self.send(0, commands.Connection.StartOk(
            client_properties={"product": "benchmarks.backlog",
                               "capabilities": {"connection.blocked": True}},
            mechanism="PLAIN", response="\0guest\0guest"))
        tune = self.expect(commands.Connection.Tune)
        self.frame_max = tune.frame_max or 131072
        self.send(0, commands.Connection.TuneOk(tune.channel_max, self.frame_max, 0))
        self.send(0, commands.Connection.Open("/"))
        self.expect(commands.Connection.OpenOk)
        self.send(1, commands.Channel.Open())
        self.expect(commands.Channel.OpenOk)

    def send(self, channel: int, method: object) -> None:
        """Send one method frame."""
        self.sock.sendall(pframe.marshal(method, channel))

    def _read_frame(self) -> tuple[int, int, bytes]:
        """(type, channel, payload) of the next frame (blocking)."""
        while True:
            if len(self.buf) >= 7:
                ftype, channel, size = _FRAME_HEAD.unpack_from(self.buf)
                if len(self.buf) >= 8 + size:
                    payload = bytes(self.buf[7:7 + size])
                    del self.buf[:8 + size]
                    return ftype, channel, payload
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.buf += data

    def expect(self, cls: type) -> object:
        """Read frames until a method of ``cls`` (skipping heartbeats and Blocked notices)."""
        while True:
            ftype, channel, payload = self._read_frame()
            if ftype != 1:
                continue
            frame = _FRAME_HEAD.pack(ftype, channel, len(payload)) + payload + FRAME_END
            try:
                _, _, method = pframe.unmarshal(frame)
            except UnmarshalingException as exc:
                raise RuntimeError(f"undecodable frame: {exc}") from None
            if isinstance(method, cls):
                return method
            if isinstance(method, commands.Connection.Close | commands.Channel.Close):
                raise RuntimeError(f"broker closed: {method.reply_code} {method.reply_text}")

    def depth(self) -> int:
        """Ready messages in the queue (passive Queue.Declare)."""
        self.send(1, commands.Queue.Declare(queue=QUEUE, durable=True, passive=True))
        return self.expect(commands.Queue.DeclareOk).message_count

    def close(self) -> None:
        """Drop the socket (the broker cleans up as after any disconnect)."""
        self.sock.close()


def body_of(i: int, size: int) -> bytes:
    """Message ``i``'s body: its number in 10 digits, padded with dots to ``size`` bytes."""
    return (b"%010d" % i).ljust(size, b".")


def publish_frames(start: int, n: int, size: int) -> bytes:
    """Basic.Publish + content header (delivery-mode 2) + one body frame, for ``n`` messages."""
    method_payload = (struct.pack(">HHH", 60, 40, 0) + b"\x00" + bytes([len(QUEUE)])
                      + QUEUE.encode() + b"\x00")
    method = _FRAME_HEAD.pack(1, 1, len(method_payload)) + method_payload + FRAME_END
    header_payload = struct.pack(">HHQH", 60, 0, size, 0x1000) + b"\x02"
    header = _FRAME_HEAD.pack(2, 1, len(header_payload)) + header_payload + FRAME_END
    body_head = _FRAME_HEAD.pack(3, 1, size)
    prefix = method + header + body_head
    return b"".join(prefix + body_of(i, size) + FRAME_END for i in range(start, start + n))


@dataclass
class Report:
    """What one run measured (bytes, seconds, messages)."""

    count: int
    size: int
    our_args: str
    baseline_rss: int = 0
    publish_seconds: float = 0.0
    backlog_rss: int = 0
    backlog_peak_rss: int = 0
    recovery_seconds: float | None = None
    recovered_rss: int | None = None
    recovered_peak_rss: int | None = None
    drain_seconds: float | None = None
    drain_peak_rss: int | None = None
    drained_ok: bool | None = None
    disk_bytes: int = 0
    notes: list[str] = field(default_factory=list)
    queue_type: str = "classic"

    def lines(self) -> list[str]:
        """The report as plain text lines."""
        per_msg = (self.backlog_rss - self.baseline_rss) / self.count
        out = [
            f"backlog: {self.count:,} persistent messages of {self.size} B in a "
            f"{self.queue_type} queue "
            f"({mib(self.count * self.size)} of bodies; {mib(self.disk_bytes)} on disk)",
            f"broker args: {self.our_args or '(defaults)'}",
            f"RSS empty: {mib(self.baseline_rss)}",
            f"published in {self.publish_seconds:.1f} s "
            f"({self.count / self.publish_seconds:,.0f} msg/s)",
            f"RSS holding the backlog: {mib(self.backlog_rss)} (peak while publishing "
            f"{mib(self.backlog_peak_rss)}); {per_msg:.1f} B per message over the empty broker",
        ]
        if self.recovery_seconds is not None:
            out.append(f"after restart: recovered in {self.recovery_seconds:.1f} s, RSS "
                       f"{mib(self.recovered_rss or 0)} (peak {mib(self.recovered_peak_rss or 0)})")
        if self.drain_seconds is not None:
            out.append(f"drained in {self.drain_seconds:.1f} s "
                       f"({self.count / self.drain_seconds:,.0f} msg/s), every body "
                       f"{'intact and in order' if self.drained_ok else 'NOT intact/in order'}; "
                       f"peak RSS {mib(self.drain_peak_rss or 0)}")
        return out + self.notes


class BacklogBroker:
    """Our broker on a fixed data dir, restartable (``start``/``stop``)."""

    def __init__(self, data_dir: Path, extra_args: list[str], log_path: Path) -> None:
        self.data_dir = data_dir
        self.extra_args = extra_args
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self, timeout: float = 600) -> float:
        """Start and wait until the port answers (recovery happens before listening); returns
        the seconds it took."""
        self.port = free_port()
        cmd = [sys.executable, "-m", "amqp_broker", "--host", HOST, "--port", str(self.port),
               "--data-dir", str(self.data_dir), "--log-level", "warning",
               "--management-port", "0", "--prometheus-port", "0", *self.extra_args]
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        try:
            wait_for_port(self.port, self.proc, timeout, "our broker")
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{tail(self.log_path)}") from None
        return time.monotonic() - t0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def status(self) -> dict[str, int]:
        """VmRSS / VmHWM of the broker process."""
        return proc_status(self.pid)

    def stop(self) -> None:
        """SIGTERM (a clean close of the stores), then SIGKILL after a bounded wait."""
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None


def publish_backlog(broker: BacklogBroker, count: int, size: int, report: Report,
                    queue_type: str = "classic") -> None:
    """Publish the backlog and wait until the queue holds all of it, sampling RSS."""
    client = RawClient(broker.port)
    client.send(1, commands.Queue.Declare(queue=QUEUE, durable=True,
                                          arguments={"x-queue-type": queue_type}))
    client.expect(commands.Queue.DeclareOk)
    time.sleep(0.5)
    report.baseline_rss = broker.status().get("VmRSS", 0)
    t0 = time.monotonic()
    last_print = t0
    for start in range(0, count, BATCH):
        client.sock.sendall(publish_frames(start, min(BATCH, count - start), size))
        now = time.monotonic()
        if now - last_print > 10:
            last_print = now
            print(f"  published {start + BATCH:,} ({(start + BATCH) / (now - t0):,.0f} msg/s), "
                  f"RSS {mib(broker.status().get('VmRSS', 0))}", flush=True)
    deadline = time.monotonic() + 600
    while (depth := client.depth()) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"queue stuck at {depth} of {count}")
        time.sleep(0.2)
    report.publish_seconds = time.monotonic() - t0
    client.close()
    time.sleep(2)  # let the store's last group commit and the GC settle
    st = broker.status()
    report.backlog_rss, report.backlog_peak_rss = st.get("VmRSS", 0), st.get("VmHWM", 0)


def drain(broker: BacklogBroker, count: int, size: int, report: Report,
          queue_type: str = "classic") -> None:
    """Consume everything (no-ack; a stream's from its first offset with manual acks, as
    RabbitMQ requires), checking each body and the order; sample the peak RSS."""
    stream = queue_type == "stream"
    client = RawClient(broker.port)
    client.send(1, commands.Basic.Qos(prefetch_count=STREAM_PREFETCH if stream else 0))
    client.expect(commands.Basic.QosOk)
    client.send(1, commands.Basic.Consume(
        queue=QUEUE, consumer_tag="drain", no_ack=not stream,
        arguments={"x-stream-offset": "first"} if stream else {}))
    client.expect(commands.Basic.ConsumeOk)
    tag = 0
    t0 = time.monotonic()
    ok = True
    got = 0
    body = bytearray()
    want = -1
    peak = 0
    while got < count:
        ftype, _ch, payload = client._read_frame()
        if ftype == 1 and stream and payload[:4] == _DELIVER:   # Basic.Deliver: its tag
            tag = struct.unpack_from(">Q", payload, 5 + payload[4])[0]
            if tag % (STREAM_PREFETCH // 2) == 0:
                client.send(1, commands.Basic.Ack(delivery_tag=tag, multiple=True))
        elif ftype == 2:
            want = struct.unpack_from(">Q", payload, 4)[0]
            body.clear()
            if want == 0:
                ok = False
                got += 1
        elif ftype == 3:
            body += payload
            if len(body) == want:
                if bytes(body) != body_of(got, size):
                    ok = False
                got += 1
                if got % 100_000 == 0:
                    peak = max(peak, broker.status().get("VmRSS", 0))
                    print(f"  drained {got:,}, RSS {mib(peak)}", flush=True)
    report.drain_seconds = time.monotonic() - t0
    if stream:   # a stream keeps what was read: every body in order is the check
        client.send(1, commands.Basic.Ack(delivery_tag=tag, multiple=True))
    report.drained_ok = ok and (stream or client.depth() == 0)
    report.drain_peak_rss = max(peak, broker.status().get("VmRSS", 0))
    client.close()


def disk_usage(path: Path) -> int:
    """Bytes of the files under ``path``."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def markdown(report: Report) -> str:
    """A section for RESULTS.md."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"## Backlog larger than RAM (issue 4): run of {when}", "",
             "`python -m benchmarks.backlog` "
             f"(`--count {report.count} --size {report.size} --queue-type {report.queue_type}`"
             + (f", broker args `{report.our_args}`" if report.our_args else "") + "): "
             "the broker's RSS while one durable queue holds the backlog with no consumer.", ""]
    lines += [f"- {line}" for line in report.lines()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status (1 when a body came back wrong)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.backlog", description=__doc__.split(
        "\n\n")[0])
    p.add_argument("--count", type=int, default=2_000_000, help="messages (default 2,000,000)")
    p.add_argument("--size", type=int, default=1024, help="body bytes (default 1024, >= 10)")
    p.add_argument("--our-args", default="", help="extra broker arguments, one string")
    p.add_argument("--data-dir", type=Path, help="broker data dir (default: a fresh temp dir)")
    p.add_argument("--no-restart", action="store_true", help="skip the restart/recovery step")
    p.add_argument("--no-consume", action="store_true", help="skip draining the queue")
    p.add_argument("--markdown", action="store_true", help="print a RESULTS.md section too")
    p.add_argument("--queue-type", choices=("classic", "quorum", "stream"), default="classic",
                   help="x-queue-type of the queue (issue 25; default classic)")
    p.add_argument("--keep", action="store_true",
                   help="keep the temp dir (data and broker log) instead of removing it")
    args = p.parse_args(argv)
    if args.size < 10:
        p.error("--size must be at least 10 (the body carries a 10-digit sequence number)")
    workdir = Path(tempfile.mkdtemp(prefix="amqp-backlog-"))
    data_dir = args.data_dir or workdir / "data"
    broker = BacklogBroker(data_dir, shlex.split(args.our_args), workdir / "broker.log")
    report = Report(args.count, args.size, args.our_args, queue_type=args.queue_type)
    try:
        broker.start()
        print(f"broker pid {broker.pid} on port {broker.port}, data in {data_dir}", flush=True)
        publish_backlog(broker, args.count, args.size, report, args.queue_type)
        report.disk_bytes = disk_usage(data_dir)
        print("\n".join(report.lines()), flush=True)
        if not args.no_restart:
            broker.stop()
            report.recovery_seconds = broker.start()
            time.sleep(1)
            st = broker.status()
            report.recovered_rss, report.recovered_peak_rss = st.get("VmRSS"), st.get("VmHWM")
            print(report.lines()[-1], flush=True)
        if not args.no_consume:
            drain(broker, args.count, args.size, report, args.queue_type)
    finally:
        broker.stop()
        if args.keep or args.data_dir is not None:
            print(f"broker log and data kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)  # gigabytes of segments otherwise
    print("\n".join(report.lines()))
    if args.markdown:
        print()
        print(markdown(report))
    return 0 if report.drained_ok in (None, True) else 1


if __name__ == "__main__":
    sys.exit(main())
