'use strict';
// (c) prefetch + nack(requeue=true): the message comes back with redelivered=true.
// usage: node nack_requeue.js <uri> <queue>
const { run, connect, args, progress } = require('./common');

run(async () => {
  const { uri, names } = args();
  const [queue] = names;
  const conn = await connect(uri);
  const ch = await conn.createChannel();
  await ch.assertQueue(queue, { durable: false });
  await ch.prefetch(1);
  ch.sendToQueue(queue, Buffer.from('first'));
  ch.sendToQueue(queue, Buffer.from('second'));
  const deliveries = [];
  progress.deliveries = deliveries;
  let maxUnacked = 0;
  let unacked = 0;
  await new Promise((resolve, reject) => {
    ch.consume(queue, (msg) => {
      if (msg === null) return reject(new Error('consumer cancelled'));
      unacked++;
      maxUnacked = Math.max(maxUnacked, unacked);
      const body = msg.content.toString();
      deliveries.push({ body, redelivered: msg.fields.redelivered });
      // Defer the (n)ack so that a broker ignoring prefetch would have
      // time to push the next message while this one is unacked.
      setTimeout(() => {
        unacked--;
        if (deliveries.length === 1) {
          ch.nack(msg, false, true); // requeue the first delivery
        } else {
          ch.ack(msg);
        }
        if (deliveries.length === 3) resolve();
      }, 100);
    }).catch(reject);
  });
  await new Promise((r) => setTimeout(r, 150));
  const q = await ch.checkQueue(queue);
  await ch.deleteQueue(queue);
  await ch.close();
  await conn.close();
  return { deliveries, maxUnacked, remaining: q.messageCount };
});
