"""aio-pika (asyncio, on aiormq) against the broker.

Covers: queue iterator consumption with ``message.process()`` (ack on success, reject with
requeue on error -> redelivered in its old place), headers exchange (x-match all / any),
exchange-to-exchange bindings (bind and unbind), publisher confirms for 10,000 messages all
acked then all consumed in order, a 1 MiB body through a consumer, reject-publish overflow as
``DeliveryError`` (Basic.Nack), mandatory publish -> ``PublishError`` carrying Basic.Return 312,
transactions (publish + rollback / commit, ack + rollback / commit), broker-initiated consumer
cancel (Basic.Cancel) when the queue is deleted, single active consumer (only the first
consumer gets messages until it cancels), passive lookup of a missing queue (404) and an
exclusive queue from another connection (405).

Sources: AMQP 0-9-1 specification (exchange types, tx class, basic.return); RabbitMQ docs
"e2e" (exchange-to-exchange bindings), "confirms", "consumer-cancel", "consumers" (single
active consumer), "maxlength" (overflow
behaviour), "semantics"/"specification" (transactions); aio-pika documentation (quick start,
patterns: queue iterator, message.process, transactions).
"""

from __future__ import annotations

import asyncio
import time

import aio_pika
import aiormq.exceptions
import pytest
from aio_pika import ExchangeType, Message

TIMEOUT = 5.0


def run(coro, timeout=60):
    """Run one test coroutine on a fresh event loop, bounded in time."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def connect(broker, **kw):
    return await aio_pika.connect(broker.uri, timeout=10, **kw)


async def get_eventually(queue, timeout=TIMEOUT, no_ack=True):
    deadline = time.monotonic() + timeout
    while True:
        msg = await queue.get(no_ack=no_ack, fail=False, timeout=TIMEOUT)
        if msg is not None:
            return msg
        if time.monotonic() > deadline:
            pytest.fail(f"nothing arrived on {queue.name} within {timeout}s")
        await asyncio.sleep(0.02)


async def drain(queue):
    out = []
    while (msg := await queue.get(no_ack=True, fail=False, timeout=TIMEOUT)) is not None:
        out.append(msg.body)
    return out


def test_queue_iterator_with_process_acks(broker, unique_name):
    async def main():
        async with await connect(broker) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue(unique_name, exclusive=True)
            for i in range(3):
                await ch.default_exchange.publish(
                    Message(b"m%d" % i, headers={"i": i}, content_type="text/plain",
                            correlation_id=f"c{i}"),
                    routing_key=q.name,
                )  # fmt: skip
            seen = []
            async with q.iterator(timeout=TIMEOUT) as it:
                async for message in it:
                    async with message.process():
                        seen.append((message.body, message.headers["i"], message.correlation_id))
                        assert message.content_type == "text/plain"
                        assert message.routing_key == q.name and message.exchange == ""
                    if len(seen) == 3:
                        break
            assert seen == [(b"m0", 0, "c0"), (b"m1", 1, "c1"), (b"m2", 2, "c2")]
            assert (await q.declare()).message_count == 0

    run(main())


def test_failed_processing_requeues_in_place(broker, unique_name):
    async def main():
        async with await connect(broker) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue(unique_name, exclusive=True)
            for body in (b"first", b"second"):
                await ch.default_exchange.publish(Message(body), routing_key=q.name)
            msg = await get_eventually(q, no_ack=False)
            with pytest.raises(RuntimeError):
                async with msg.process(requeue=True):
                    raise RuntimeError("handler failed")
            again = await get_eventually(q, no_ack=False)
            assert (again.body, again.redelivered) == (b"first", True)
            await again.nack(requeue=True)
            third = await get_eventually(q)
            assert (third.body, third.redelivered) == (b"first", True)
            assert await drain(q) == [b"second"]

    run(main())


def test_headers_exchange_all_and_any(broker, unique_name):
    async def main():
        async with await connect(broker) as conn:
            ch = await conn.channel()
            ex = await ch.declare_exchange(unique_name, ExchangeType.HEADERS, auto_delete=True)
            match = {"format": "pdf", "type": "report"}
            queues = {}
            for mode in ("all", "any", None):
                q = await ch.declare_queue(f"{unique_name}.{mode}", exclusive=True)
                args = dict(match) if mode is None else {**match, "x-match": mode}
                await q.bind(ex, arguments=args)
                queues[mode] = q
            cases = [
                ({"format": "pdf", "type": "report"}, {"all", "any", None}),
                ({"format": "pdf", "type": "report", "extra": 1}, {"all", "any", None}),
                ({"format": "pdf"}, {"any"}),
                ({"format": "pdf", "type": "log"}, {"any"}),
                ({"format": "zip"}, set()),
                ({}, set()),
            ]
            for headers, expected in cases:
                await ex.publish(Message(b"h", headers=headers), routing_key="ignored")
                got = {mode for mode, q in queues.items() if await drain(q)}
                assert got == expected, headers

    run(main())


def test_exchange_to_exchange_binding(broker, unique_name):
    async def main():
        async with await connect(broker) as conn:
            ch = await conn.channel()
            src = await ch.declare_exchange(unique_name + ".src", ExchangeType.TOPIC)
            dst = await ch.declare_exchange(unique_name + ".dst", ExchangeType.FANOUT,
                                            auto_delete=True)  # fmt: skip
            q = await ch.declare_queue(unique_name, exclusive=True)
            await q.bind(dst)
            await dst.bind(src, routing_key="orders.*")
            await src.publish(Message(b"routed"), routing_key="orders.new")
            await src.publish(Message(b"filtered"), routing_key="invoices.new")
            msg = await get_eventually(q)
            assert (msg.body, msg.exchange, msg.routing_key) == (b"routed", src.name, "orders.new")
            assert await drain(q) == []
            await dst.unbind(src, routing_key="orders.*")
            await src.publish(Message(b"after unbind"), routing_key="orders.new")
            assert await drain(q) == []
            await src.delete()
            # an auto-delete exchange goes away when its last (here: e2e) binding is removed
            ad = await ch.declare_exchange(unique_name + ".ad", ExchangeType.FANOUT,
                                           auto_delete=True)  # fmt: skip
            await dst.bind(ad)
            await ad.publish(Message(b"via ad"), routing_key="")
            assert (await get_eventually(q)).body == b"via ad"
            await dst.unbind(ad)
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity):
                await ch.get_exchange(ad.name, ensure=True)

    run(main())


def test_ten_thousand_confirmed_messages_all_consumed(broker, unique_name):
    total, batch = 10_000, 500

    async def main():
        async with await connect(broker) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue(unique_name, exclusive=True)
            for start in range(0, total, batch):
                confirms = await asyncio.gather(*(
                    ch.default_exchange.publish(Message(b"%d" % i), routing_key=q.name)
                    for i in range(start, start + batch)
                ))  # fmt: skip
                assert all(isinstance(c, aiormq.spec.Basic.Ack) for c in confirms)
            assert (await q.declare()).message_count == total
            cch = await conn.channel()
            await cch.set_qos(prefetch_count=1000)
            cq = await cch.get_queue(q.name)
            received = []
            async with cq.iterator(timeout=TIMEOUT) as it:
                async for message in it:
                    received.append(int(message.body))
                    if len(received) % 250 == 0 or len(received) == total:
                        await message.ack(multiple=True)
                    if len(received) == total:
                        break
            assert received == list(range(total))
            await asyncio.sleep(0.2)
            assert (await q.declare()).message_count == 0

    run(main(), timeout=110)


def test_one_mib_body_through_consumer(broker, unique_name):
    body = bytes(range(256)) * 4096

    async def main():
        async with await connect(broker) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue(unique_name, exclusive=True)
            await ch.default_exchange.publish(Message(body, message_id="big"), routing_key=q.name)
            got = asyncio.get_running_loop().create_future()

            async def on_message(message):
                await message.ack()
                if not got.done():
                    got.set_result(message)

            await q.consume(on_message)
            message = await asyncio.wait_for(got, TIMEOUT)
            assert message.message_id == "big" and message.body_size == len(body)
            assert message.body == body

    run(main())


def test_reject_publish_overflow_is_nacked(broker, unique_name):
    async def main():
        async with await connect(broker) as conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue(unique_name, exclusive=True,
                                       arguments={"x-max-length": 1, "x-overflow": "reject-publish"})  # fmt: skip
            ok = await ch.default_exchange.publish(Message(b"fits"), routing_key=q.name)
            assert isinstance(ok, aiormq.spec.Basic.Ack)
            with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
                await ch.default_exchange.publish(Message(b"too many"), routing_key=q.name)
            assert isinstance(info.value.frame, aiormq.spec.Basic.Nack)
            assert await drain(q) == [b"fits"]

    run(main())


def test_mandatory_unroutable_raises_publish_error(broker, unique_name):
    async def main():
        async with await connect(broker) as conn:
            ch = await conn.channel(publisher_confirms=True, on_return_raises=True)
            ex = await ch.declare_exchange(unique_name, ExchangeType.DIRECT, auto_delete=True)
            q = await ch.declare_queue(unique_name, exclusive=True)
            await q.bind(ex, "known")
            with pytest.raises(aio_pika.exceptions.PublishError) as info:
                await ex.publish(Message(b"x"), routing_key="unknown", mandatory=True)
            frame = info.value.frame
            assert (frame.reply_code, frame.reply_text) == (312, "NO_ROUTE")
            assert (frame.exchange, frame.routing_key) == (ex.name, "unknown")
            ok = await ex.publish(Message(b"y"), routing_key="known", mandatory=True)
            assert isinstance(ok, aiormq.spec.Basic.Ack)

    run(main())


def test_transactions_publish_and_ack(broker, unique_name):
    async def main():
        async with await connect(broker) as conn:
            setup = await conn.channel()
            q = await setup.declare_queue(unique_name, exclusive=True)
            ch = await conn.channel(publisher_confirms=False)
            tx = ch.transaction()
            await tx.select()
            await ch.default_exchange.publish(Message(b"rolled back"), routing_key=q.name)
            await tx.rollback()
            assert (await q.declare()).message_count == 0
            await ch.default_exchange.publish(Message(b"committed"), routing_key=q.name)
            assert await drain(q) == []  # not visible before commit
            await tx.commit()
            txq = await ch.get_queue(q.name)
            msg = await get_eventually(txq, no_ack=False)
            assert msg.body == b"committed"
            await msg.ack()
            await tx.rollback()  # the ack is undone: the message stays unacked on ch
            assert (await q.declare()).message_count == 0
            await ch.close()  # closing the channel requeues its unacked message
            again = await get_eventually(q)
            assert (again.body, again.redelivered) == (b"committed", True)
            # an ack inside a committed transaction really removes the message
            await setup.default_exchange.publish(Message(b"acked"), routing_key=q.name)
            ch2 = await conn.channel(publisher_confirms=False)
            tx2 = ch2.transaction()
            await tx2.select()
            msg = await get_eventually(await ch2.get_queue(q.name), no_ack=False)
            assert msg.body == b"acked"
            await msg.ack()
            await tx2.commit()
            await ch2.close()
            await asyncio.sleep(0.1)
            assert (await q.declare()).message_count == 0

    run(main())


def test_consumer_cancelled_by_broker_on_queue_delete(broker, unique_name):
    async def main():
        async with await connect(broker) as conn:
            ch = await conn.channel()
            q = await ch.declare_queue(unique_name, auto_delete=False)
            cancelled = asyncio.get_running_loop().create_future()
            underlay = await ch.get_underlay_channel()
            underlay.on_consumer_cancel_callbacks.add(
                lambda frame: cancelled.done() or cancelled.set_result(frame)
            )
            async def ignore(message):
                pass

            tag = await q.consume(ignore)
            other = await conn.channel()
            await other.queue_delete(q.name)
            frame = await asyncio.wait_for(cancelled, TIMEOUT)
            assert isinstance(frame, aiormq.spec.Basic.Cancel)
            assert frame.consumer_tag == tag
            assert not ch.is_closed

    run(main())


def test_single_active_consumer(broker, unique_name):
    async def main():
        async with await connect(broker) as conn:
            ch1, ch2 = await conn.channel(), await conn.channel()
            q1 = await ch1.declare_queue(unique_name, exclusive=True,
                                         arguments={"x-single-active-consumer": True})  # fmt: skip
            q2 = await ch2.get_queue(q1.name)
            first, second = [], []

            def collector(sink):
                async def on_message(message):
                    sink.append(message.body)
                    await message.ack()

                return on_message

            tag1 = await q1.consume(collector(first))
            await q2.consume(collector(second))
            for i in range(4):
                await ch1.default_exchange.publish(Message(b"%d" % i), routing_key=q1.name)
            deadline = time.monotonic() + TIMEOUT
            while len(first) < 4 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)
            assert (first, second) == ([b"0", b"1", b"2", b"3"], [])
            await q1.cancel(tag1)
            for i in range(4, 6):
                await ch1.default_exchange.publish(Message(b"%d" % i), routing_key=q1.name)
            while len(second) < 2 and time.monotonic() < deadline + TIMEOUT:
                await asyncio.sleep(0.02)
            assert (len(first), second) == (4, [b"4", b"5"])

    run(main())


def test_missing_queue_404_and_locked_queue_405(broker, unique_name):
    async def main():
        async with await connect(broker) as conn, await connect(broker) as other:
            ch = await conn.channel()
            with pytest.raises(aio_pika.exceptions.ChannelNotFoundEntity) as info:
                await ch.get_queue(unique_name + ".missing", ensure=True)
            # aiormq maps reply code 404 to this class; args[0] is the reply text
            assert info.value.args[0].startswith("NOT_FOUND")
            ch = await conn.channel()  # the failed channel is closed, the connection is not
            await ch.declare_queue(unique_name, exclusive=True)
            och = await other.channel()
            with pytest.raises(aiormq.exceptions.ChannelLockedResource) as info:
                await och.declare_queue(unique_name)
            assert info.value.args[0].startswith("RESOURCE_LOCKED")
            assert not other.is_closed

    run(main())
