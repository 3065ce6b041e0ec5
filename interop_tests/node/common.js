'use strict';
// Shared helpers for the amqplib interop scripts: a hard deadline so that no
// script can hang, and one JSON line of output on stdout.
const amqp = require('amqplib');

// Scripts record how far they got here; it is printed if the deadline hits.
const progress = {};

function run(main, timeoutMs = 20000) {
  const timer = setTimeout(() => {
    process.stdout.write(JSON.stringify({ ok: false, error: 'timeout after ' + timeoutMs + ' ms', progress }) + '\n');
    process.exit(3);
  }, timeoutMs);
  Promise.resolve()
    .then(main)
    .then((result) => {
      clearTimeout(timer);
      process.stdout.write(JSON.stringify(Object.assign({ ok: true }, result)) + '\n');
      process.exit(0);
    })
    .catch((err) => {
      clearTimeout(timer);
      process.stdout.write(JSON.stringify({ ok: false, error: String(err && err.stack || err), code: err && err.code }) + '\n');
      process.exit(1);
    });
}

function connect(uri) {
  return amqp.connect(uri);
}

function args() {
  const a = process.argv.slice(2);
  if (a.length < 1) throw new Error('usage: node script.js <uri> <names...>');
  return { uri: a[0], names: a.slice(1) };
}

module.exports = { amqp, run, connect, args, progress };
