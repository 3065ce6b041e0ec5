'use strict';
// (a) assertExchange(topic)/assertQueue/bindQueue/publish/consume/ack round trip.
// usage: node roundtrip.js <uri> <exchange> <queue> [count]
const { run, connect, args, progress } = require('./common');

run(async () => {
  const { uri, names } = args();
  const [exchange, queue] = names;
  const count = parseInt(names[2] || '100', 10);
  const conn = await connect(uri);
  const ch = await conn.createChannel();
  await ch.assertExchange(exchange, 'topic', { durable: false, autoDelete: false });
  const q = await ch.assertQueue(queue, { durable: false, exclusive: false, autoDelete: false });
  await ch.bindQueue(queue, exchange, 'interop.*.node');
  // A second queue binding that must NOT match, to check topic routing.
  for (let i = 0; i < count; i++) {
    ch.publish(exchange, 'interop.' + i + '.node', Buffer.from('msg-' + i), {
      contentType: 'text/plain',
      headers: { idx: i },
      messageId: 'id-' + i,
      correlationId: 'corr-' + i,
      deliveryMode: 1,
    });
  }
  // A message with a non-matching key: must not arrive.
  ch.publish(exchange, 'other.key', Buffer.from('unroutable'));
  const received = [];
  progress.received = received;
  let props = null;
  let redelivered = 0;
  await new Promise((resolve, reject) => {
    ch.consume(queue, (msg) => {
      if (msg === null) return reject(new Error('consumer cancelled'));
      const body = msg.content.toString();
      received.push(body);
      if (msg.fields.redelivered) redelivered++;
      if (props === null) {
        props = {
          contentType: msg.properties.contentType,
          messageId: msg.properties.messageId,
          correlationId: msg.properties.correlationId,
          headers: msg.properties.headers,
          routingKey: msg.fields.routingKey,
          exchange: msg.fields.exchange,
        };
      }
      ch.ack(msg);
      if (received.length === count) resolve();
    }, { noAck: false }).catch(reject);
  });
  // Give a stray unroutable message the chance to (wrongly) show up.
  await new Promise((r) => setTimeout(r, 200));
  const check = await ch.checkQueue(queue);
  await ch.deleteQueue(queue);
  await ch.deleteExchange(exchange);
  await ch.close();
  await conn.close();
  return {
    declaredQueue: q.queue,
    received,
    firstProps: props,
    redelivered,
    remainingAfter: check.messageCount,
  };
});
