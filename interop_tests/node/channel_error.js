'use strict';
// (d) checkQueue on a missing queue closes the channel with 404 NOT_FOUND;
// the connection stays usable and a new channel works.
// usage: node channel_error.js <uri> <missing-queue> <good-queue>
const { run, connect, args } = require('./common');

run(async () => {
  const { uri, names } = args();
  const [missing, good] = names;
  const conn = await connect(uri);
  let connError = null;
  conn.on('error', (e) => { connError = String(e); });
  const ch1 = await conn.createChannel();
  let chanClosedEvent = false;
  ch1.on('error', () => {});
  ch1.on('close', () => { chanClosedEvent = true; });
  let err = null;
  try {
    await ch1.checkQueue(missing);
  } catch (e) {
    err = { code: e.code, message: String(e.message) };
  }
  // Using the closed channel again must fail client-side, not hang.
  const ch2 = await conn.createChannel();
  await ch2.assertQueue(good, { durable: false });
  ch2.sendToQueue(good, Buffer.from('after-error'));
  let got = false;
  for (let i = 0; i < 50 && !got; i++) {
    got = await ch2.get(good, { noAck: true });
    if (!got) await new Promise((r) => setTimeout(r, 20));
  }
  await ch2.deleteQueue(good);
  await ch2.close();
  await conn.close();
  return {
    error: err,
    channelClosedEvent: chanClosedEvent,
    connectionError: connError,
    afterErrorBody: got ? got.content.toString() : null,
  };
});
