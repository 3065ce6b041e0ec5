"""Composition root: build the broker from a ``Config`` and run it on anyio (uvloop when installed).

Source: DESIGN.md §2. ``run(config)`` blocks until SIGINT/SIGTERM.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from pathlib import Path

import anyio

from queues.store.store import MessageStore
from queues.stream.manager import StreamManager

from . import clustering, data_lock, dedup_state
from .clustering import quorum as quorum_runtime
from .clustering import stream as stream_runtime
from .config import Config
from .core import policy_store
from .core.broker import Broker
from .core.durability import Durability
from .core.recovery import recover
from .definitions.store import DefinitionsStore
from .management import persist
from .management import server as management_server
from .server.amqps import TlsServer
from .server.gc_tuning import tune_gc
from .server.group_commit import WriteRetry
from .server.listener import run_broker
from .server.malloc_tuning import tune_malloc
from .server.tls import TlsOptions, server_context

__all__ = ["run", "serve", "shutdown"]

log = logging.getLogger("amqp_broker")


def open_broker(config: Config) -> Broker:
    """A broker with its durable state (definitions.db and messages/ under ``config.data_dir``)
    recovered. Raises ``OSError`` / ``FormatError`` / ``DefinitionsError`` for unusable data."""
    data = Path(config.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    durability = Durability(MessageStore(data / "messages", sync=config.sync_policy),
                            DefinitionsStore(data / "definitions.db"))
    broker = Broker(config.broker_settings(), durability=durability)
    #: Stream queues' logs (data/streams/<vhost>/<queue>/), opened as recovery declares them.
    broker.streams = StreamManager(data / "streams", sync=config.sync_policy)
    # quorum queues (issue 12): registered before recovery so recovered ones open their replicas
    quorum = quorum_runtime.install(broker, data, config.node_name,
                                    fsync=config.sync_policy != "none")
    stream_runtime.install(broker, quorum)   # streams declared in a cluster: replicated
    definitions = durability.definitions
    assert definitions is not None
    with definitions.transaction():
        for name in broker.vhosts:
            definitions.save_vhost(name)
    policy_store.load_policies(broker)   # before recovery: policies of vhosts restored later
    recover(broker)
    broker.delayed.open(data / "delayed.log")   # after the exchanges it routes through
    persist.load_access(broker)
    dedup_state.load(data, broker)
    return broker


def close_broker(broker: Broker, data_dir: Path) -> None:
    """Save the dedup windows, flush and close the stores (a clean close: recovery then needs no
    redelivered flags)."""
    try:
        dedup_state.save(data_dir, broker)
    except OSError as exc:
        log.error("cannot save dedup windows: %s", exc)
    streams = getattr(broker, "streams", None)
    if streams is not None:
        streams.close()
    quorum = getattr(broker, "quorum", None)
    if quorum is not None:
        quorum.close()
    metadata = getattr(broker, "metadata", None)   # the cluster metadata log (clustering)
    if metadata is not None:
        metadata.close()
    broker.delayed.close()
    durability = broker.durability
    if durability.store is not None:
        durability.store.close()
    if durability.definitions is not None:
        durability.definitions.close()


async def serve(config: Config, ready: Callable[[int], None] | None = None) -> None:
    """Start a broker for ``config`` and serve until cancelled or a SIGINT/SIGTERM arrives.
    Raises ``data_lock.DataDirInUse`` (an ``OSError``: exit code 1) when another broker runs on
    ``config.data_dir``."""
    lock = data_lock.lock(config.data_dir)   # before anything reads the directory
    try:
        broker = open_broker(config)
        try:
            await _serve(broker, config, ready)
        finally:
            close_broker(broker, Path(config.data_dir))
    finally:
        data_lock.unlock(lock)


async def _serve(broker: Broker, config: Config, ready: Callable[[int], None] | None) -> None:
    clustered = bool(config.seeds or config.cluster_name or config.cluster_secret)
    drivers: list = []
    async with anyio.create_task_group() as tg:
        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    log.info("signal %s: shutting down", signal.Signals(signum).name)
                    quorum = getattr(broker, "quorum", None)
                    if quorum is not None and drivers:  # quorum leaders hand over first
                        await quorum.hand_over()
                    if drivers:
                        await clustering.leave_cluster(drivers[0])
                    await shutdown(broker)
                    tg.cancel_scope.cancel()
                    return

        async def join(port: int) -> None:
            drivers.append(await clustering.start_cluster(broker, config, port, tg))

        mgmt = await management_server.start(broker, config, tg)
        tls_port: list[int] = []  # the AMQPS port once listening (before ``listening``)

        def listening(port: int) -> None:
            management_server.amqp_ready(mgmt, config.host, port)
            if clustered:
                # with --cluster-tls-dir a member's cluster address is its TLS port: peer links
                # go there over mutual TLS (docs/tls-and-access.md)
                tg.start_soon(join, tls_port[0] if config.cluster_tls_dir else port)
            if ready is not None:
                ready(port)

        async def snapshot_dedup() -> None:
            last = dedup_state.changes(broker)
            while True:
                await anyio.sleep(dedup_state.SNAPSHOT_SECONDS)
                now = dedup_state.changes(broker)
                if now != last:
                    payload = dedup_state.collect(broker)
                    try:
                        await anyio.to_thread.run_sync(dedup_state.write, Path(config.data_dir),
                                                       payload)
                    except OSError as exc:
                        log.error("cannot save dedup windows: %s", exc)
                    last = now

        tg.start_soon(stop_on_signal)
        tg.start_soon(snapshot_dedup)
        tg.start_soon(_stream_syncer, broker)
        quorum = getattr(broker, "quorum", None)
        if quorum is not None:
            tg.start_soon(quorum.run)
        tls = tls_server(broker, config)

        def tls_listening(port: int) -> None:
            tls_port.append(port)
            management_server.amqps_ready(mgmt, config.host, port)

        await run_broker(broker, config.host, config.port, listening, data_dir=config.data_dir,
                         tls=tls, tls_port=config.tls_port, tls_ready=tls_listening)


def tls_options(config: Config) -> TlsOptions:
    """The AMQPS listener's options from ``config`` (``--tls-*``, ``--cluster-tls-dir``)."""
    return TlsOptions(config.tls_cert, config.tls_key, config.tls_ca, config.tls_verify,
                      config.tls_fail_if_no_peer_cert, config.tls_login_from,
                      config.cluster_tls_dir, config.node_name)


def tls_server(broker: Broker, config: Config) -> TlsServer | None:
    """The AMQPS server when TLS is configured, else None. Raises ``OSError`` /
    ``ssl.SSLError`` / ``ValueError`` for unreadable or mismatched certificate files."""
    if not config.tls_enabled:
        return None
    options = tls_options(config)
    context, cluster = server_context(options)
    return TlsServer(broker, options, context, cluster)


async def _stream_syncer(broker: Broker) -> None:
    """Group commit of the stream logs (as the message store's syncer): whenever a stream has new
    records or a confirm waits, flush every log to the OS, fdatasync in a worker thread, then send
    the publisher confirms that sync covers. One fsync serves everything appended before it. A
    write that fails (ENOSPC: a full disk, before the disk alarm stopped the publishers) leaves
    the segment files whole and the records buffered (``StreamLog.flush``): no confirm goes out
    for them, and the write is tried again (``server.group_commit.WriteRetry``). A failed fsync
    stops the broker."""
    manager = getattr(broker, "streams", None)
    if manager is None:
        return
    wake = anyio.Event()

    def on_dirty() -> None:
        wake.set()

    manager.on_dirty = on_dirty
    manager.syncing = True
    if manager.dirty:
        wake.set()
    writes = WriteRetry("streams")
    try:
        while True:
            await wake.wait()
            wake = anyio.Event()
            sync = await writes.flush(manager.flush)
            if sync is None:   # ENOSPC: the logs stay whole, their buffers kept
                wake.set()
                continue
            await writes.fsync(sync.run)
            manager.synced(sync)  # the publishers watching it get their confirms
            broker.run_dispatch()
    finally:
        manager.on_dirty = None
        manager.syncing = False


async def shutdown(broker: Broker, grace: float = 2.0) -> None:
    """Close every client connection with 320 CONNECTION_FORCED (as RabbitMQ does on shutdown)
    and give the writers up to ``grace`` seconds to send it. Acks of relayed messages still
    gathering (``core.relay_inbox``) go first, so their senders do not deliver them again."""
    broker.relay_inbox.flush_acks()
    for conn in list(broker.connections.values()):
        conn.close_forced("CONNECTION_FORCED - broker forced connection closure with reason "
                          "'shutdown'")
    with anyio.move_on_after(grace):
        while any(c.output_size for c in broker.connections.values()):
            await anyio.sleep(0.02)


def run(config: Config) -> None:
    """Run the broker in this thread until stopped."""
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    def ready(port: int) -> None:
        log.info("broker %s ready on %s:%s (data dir %s)", config.node_name, config.host, port,
                 config.data_dir)

    tune_malloc()
    tune_gc()
    backend_options = {}
    try:
        import uvloop  # noqa: F401
        backend_options["use_uvloop"] = True
    except ImportError:
        pass
    anyio.run(serve, config, ready, backend="asyncio", backend_options=backend_options)
