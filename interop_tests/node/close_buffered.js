'use strict';
// Issue 9 (5): publish until amqplib's write buffer is full, then close the connection at once,
// with publishes still buffered behind (amqplib's frame mux may send the Close ahead of them).
// RabbitMQ answers Close-Ok and reads on until the client closes its socket; a broker that
// closes the socket at once makes the remaining writes fail with EPIPE, an 'error' event nobody
// handles here (on purpose, as in real programs), and the Node process dies.
// usage: node close_buffered.js <uri> <queue> <rounds>
const { run, connect, args } = require('./common');

run(async () => {
  const { uri, names } = args();
  const [queue, roundsArg] = names;
  const rounds = Number(roundsArg || 5);
  const body = Buffer.alloc(16384, 120);
  let published = 0;
  for (let r = 0; r < rounds; r++) {
    const conn = await connect(uri);
    const ch = await conn.createChannel();
    await ch.assertQueue(queue, { durable: false });
    for (let i = 0; i < 100000 && ch.sendToQueue(queue, body); i++) published++;
    for (let i = 0; i < 50; i++) { ch.sendToQueue(queue, body); published++; }
    await conn.close();
  }
  await new Promise((resolve) => setTimeout(resolve, 500)); // a late 'error' would fire here
  const conn = await connect(uri);
  const ch = await conn.createChannel();
  await ch.deleteQueue(queue);
  await conn.close();
  return { published, rounds };
}, 60000);
