'use strict';
// nodehop: a grpc-js service that forwards the named unary methods, as bytes, to --upstream: a hop in Node for
// drilling a fleet that is not Python (issue 47). It has NO propagation code of its own: OpenTelemetry's NodeSDK
// with @opentelemetry/instrumentation-grpc (default propagators: W3C tracecontext + baggage; no trace exporter)
// carries the caller's `baggage` to the upstream call, as it does for any instrumented service. The x-* drill keys
// are not forwarded (a plain service forwards none of them). --no-otel starts it without instrumentation: a hop
// that drops the drill.
//
// The caller's deadline goes on (the upstream call gets what is left); the upstream's headers, status code, details
// and trailers come back. grpc.health.v1 Check answers SERVING. --log FILE: one JSON line per call (method, code,
// request id and tenant as this hop saw them: the x-* keys, else the drill.* baggage entries). When serving it
// prints "ready" and writes --ready-file / --port-file (the port).
//
//   node hop.js --upstream HOST:PORT [--port N] [--port-file F] [--ready-file F] [--log FILE] [--name NAME]
//               [--methods /drill.v1.Demo/Call,/drill.v1.Demo/Write] [--no-otel]

const fs = require('fs');

function usage(message) {
  process.stderr.write(`nodehop: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const opts = { port: '0', methods: '/drill.v1.Demo/Call,/drill.v1.Demo/Write', name: 'nodehop', otel: true };
  const valued = new Set(['upstream', 'port', 'port-file', 'ready-file', 'log', 'name', 'methods']);
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--no-otel') { opts.otel = false; continue; }
    const name = arg.startsWith('--') ? arg.slice(2).split('=')[0] : '';
    if (!valued.has(name)) usage(`unknown argument ${JSON.stringify(arg)}`);
    const value = arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : argv[++i];
    if (value === undefined) usage(`--${name} needs a value`);
    opts[name] = value;
  }
  if (!opts.upstream) usage('--upstream HOST:PORT is required');
  if (!/^\d+$/.test(opts.port)) usage(`--port ${opts.port} is not a port`);
  return opts;
}

const opts = parseArgs(process.argv.slice(2));

if (opts.otel) {
  // Before grpc-js is loaded, so the instrumentation patches it. Nothing is exported: only propagation is wanted.
  process.env.OTEL_TRACES_EXPORTER = 'none';
  process.env.OTEL_METRICS_EXPORTER = 'none';
  process.env.OTEL_LOGS_EXPORTER = 'none';
  const { NodeSDK } = require('@opentelemetry/sdk-node');
  const { GrpcInstrumentation } = require('@opentelemetry/instrumentation-grpc');
  new NodeSDK({ serviceName: opts.name, instrumentations: [new GrpcInstrumentation()] }).start();
}

const grpc = require('@grpc/grpc-js');

const identity = (b) => b;
const BAGGAGE_TENANT = 'drill.tenant'; // harness/core/headers.py spells every drill baggage name
const BAGGAGE_REQUEST_ID = 'drill.request-id';

const logFile = opts.log ? fs.openSync(opts.log, 'a') : null;

function seen(metadata) {
  const first = (key) => { const v = metadata.get(key); return v.length ? String(v[0]) : ''; };
  let requestId = first('x-request-id');
  let tenant = first('x-tenant-id');
  if (!requestId && !tenant) {
    for (const member of first('baggage').split(',')) {
      const [kv] = member.split(';');
      const eq = kv.indexOf('=');
      if (eq < 0) continue;
      const key = kv.slice(0, eq).trim();
      let value = kv.slice(eq + 1).trim();
      try { value = decodeURIComponent(value); } catch (e) { /* kept as it came */ }
      if (key === BAGGAGE_REQUEST_ID) requestId = value;
      if (key === BAGGAGE_TENANT) tenant = value;
    }
  }
  return { requestId, tenant };
}

function logLine(method, code, metadata, start) {
  if (logFile === null) return;
  const { requestId, tenant } = seen(metadata);
  const line = { hop: opts.name, method, code: grpc.status[code] || String(code), request_id: requestId, tenant,
    ms: Number(process.hrtime.bigint() - start) / 1e6 };
  fs.writeSync(logFile, JSON.stringify(line) + '\n');
}

const upstream = new grpc.Client(opts.upstream, grpc.credentials.createInsecure());

function forwarder(method) {
  return (call, callback) => {
    const start = process.hrtime.bigint();
    const options = {};
    const deadline = call.getDeadline();
    if (deadline !== Infinity) options.deadline = deadline;
    // A new, empty metadata: whatever reaches the upstream besides the body is OpenTelemetry's doing.
    let response = null;
    const outgoing = upstream.makeUnaryRequest(method, identity, identity, call.request, new grpc.Metadata(), options,
      (err, value) => { if (!err) response = value; });
    outgoing.on('metadata', (headers) => call.sendMetadata(headers));
    // The status comes after the callback, with the trailers (an injected fault's marker rides on them, an OK
    // delay's too). An error's reach the caller; an OK answer's are handed to grpc-js but dropped under
    // OpenTelemetry (instrumentation-grpc's unary wrapper calls back with err and value only), as they would be
    // in any service instrumented so.
    outgoing.on('status', (status) => {
      logLine(method, status.code, call.metadata, start);
      if (status.code === grpc.status.OK) callback(null, response, status.metadata);
      else callback({ code: status.code, details: status.details, metadata: status.metadata });
    });
    call.on('cancelled', () => outgoing.cancel());
  };
}

const server = new grpc.Server();
for (const method of opts.methods.split(',').map((m) => m.trim()).filter(Boolean)) {
  if (!/^\/[\w.]+\/\w+$/.test(method)) usage(`--methods: ${JSON.stringify(method)} is not /package.Service/Method`);
  server.register(method, forwarder(method), identity, identity, 'unary');
}
// grpc.health.v1.Health/Check: HealthCheckResponse{status: SERVING} is the two bytes 08 01.
server.register('/grpc.health.v1.Health/Check', (call, callback) => callback(null, Buffer.from([8, 1])),
  identity, identity, 'unary');

server.bindAsync(`127.0.0.1:${opts.port}`, grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) {
    process.stderr.write(`nodehop: ${err.message}\n`);
    process.exit(1);
  }
  for (const path of [opts['port-file'], opts['ready-file']]) {
    if (!path) continue;
    fs.writeFileSync(`${path}.tmp`, String(port));
    fs.renameSync(`${path}.tmp`, path); // only a whole file is ever found
  }
  process.stdout.write('ready\n');
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => { server.forceShutdown(); process.exit(0); });
}
