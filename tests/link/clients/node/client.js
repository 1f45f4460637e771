// A grpc-js client for the link's tests (tests/link/test_languages.py): raw bytes, no generated code.
//
//   node client.js HOST:PORT '{"grpc.keepalive_time_ms": 1000, ...}'
//
// Each line on stdin starts one call at once: {"id", "method" (echo.Echo's), "payload" (text), "deadline_ms",
// "metadata" ({key: value})}; each call that ends writes one line on stdout: {"id", "code" (grpc status name),
// "ms" (from its start), "reply" (text, when OK), "details"}. Stdin's end closes the channel once calls ended.
// @grpc/grpc-js comes from harness/fleet/nodehop's node_modules (NODE_PATH), the version its lockfile pins.
'use strict';
const grpc = require('@grpc/grpc-js');
const readline = require('readline');

const [target, optionsJson] = process.argv.slice(2);
const client = new grpc.Client(target, grpc.credentials.createInsecure(), JSON.parse(optionsJson || '{}'));
const names = Object.fromEntries(Object.entries(grpc.status).map(([name, code]) => [code, name]));
const identity = (b) => b;
let pending = 0;
let ended = false;

function finish() {
  if (ended && pending === 0) client.close();
}

readline.createInterface({ input: process.stdin }).on('line', (line) => {
  if (!line.trim()) return;
  const spec = JSON.parse(line);
  const metadata = new grpc.Metadata();
  for (const [key, value] of Object.entries(spec.metadata || {})) metadata.set(key, value);
  const start = process.hrtime.bigint();
  pending += 1;
  client.makeUnaryRequest(`/echo.Echo/${spec.method || 'Unary'}`, identity, identity,
    Buffer.from(spec.payload || ''), metadata, { deadline: Date.now() + (spec.deadline_ms || 5000) },
    (err, reply) => {
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      const out = { id: spec.id, code: err ? names[err.code] : 'OK', ms };
      if (err) out.details = err.details;
      else out.reply = reply.toString();
      process.stdout.write(JSON.stringify(out) + '\n');
      pending -= 1;
      finish();
    });
}).on('close', () => {
  ended = true;
  finish();
});
