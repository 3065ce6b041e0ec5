'use strict';
// (e) basic.get on an empty queue (false), then on a queue with messages
// (message, messageCount), with and without noAck.
// usage: node get.js <uri> <queue>
const { run, connect, args } = require('./common');

run(async () => {
  const { uri, names } = args();
  const [queue] = names;
  const conn = await connect(uri);
  const ch = await conn.createChannel();
  await ch.assertQueue(queue, { durable: false });
  const empty = await ch.get(queue);
  ch.sendToQueue(queue, Buffer.from('g1'), { priority: 0, type: 't1' });
  ch.sendToQueue(queue, Buffer.from('g2'));
  ch.sendToQueue(queue, Buffer.from('g3'));
  // Make sure the publishes have been processed before getting.
  let ok = null;
  for (let i = 0; i < 100; i++) {
    ok = await ch.checkQueue(queue);
    if (ok.messageCount === 3) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const m1 = await ch.get(queue, { noAck: false });
  ch.ack(m1);
  const m2 = await ch.get(queue, { noAck: true });
  const m3 = await ch.get(queue, { noAck: false });
  ch.reject(m3, true); // requeue
  const m3again = await ch.get(queue, { noAck: true });
  const emptyAgain = await ch.get(queue);
  await ch.deleteQueue(queue);
  await ch.close();
  await conn.close();
  const desc = (m) => m && {
    body: m.content.toString(),
    messageCount: m.fields.messageCount,
    redelivered: m.fields.redelivered,
    routingKey: m.fields.routingKey,
    exchange: m.fields.exchange,
    type: m.properties.type,
  };
  return {
    countBefore: ok.messageCount,
    empty: empty === false ? false : desc(empty),
    m1: desc(m1),
    m2: desc(m2),
    m3: desc(m3),
    m3again: desc(m3again),
    emptyAgain: emptyAgain === false ? false : desc(emptyAgain),
  };
});
