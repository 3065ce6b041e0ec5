'use strict';
// (b) Confirm channel: publish N messages, waitForConfirms, then count them.
// usage: node confirms.js <uri> <queue> [count]
const { run, connect, args } = require('./common');

run(async () => {
  const { uri, names } = args();
  const [queue] = names;
  const count = parseInt(names[1] || '1000', 10);
  const conn = await connect(uri);
  const ch = await conn.createConfirmChannel();
  await ch.assertQueue(queue, { durable: false });
  let acked = 0;
  let nacked = 0;
  for (let i = 0; i < count; i++) {
    ch.sendToQueue(queue, Buffer.from('c' + i), {}, (err) => {
      if (err) nacked++; else acked++;
    });
  }
  await ch.waitForConfirms();
  const q = await ch.checkQueue(queue);
  await ch.deleteQueue(queue);
  await ch.close();
  await conn.close();
  return { acked, nacked, messageCount: q.messageCount };
});
