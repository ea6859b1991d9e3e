// The worker's public surface checked against the contract every SDK follows,
// conformance/worker-contract.json (read from the repository, never copied): the options of
// `WorkerOptions` and the fields and types of `WorkerEvent`, read from the published declarations
// (dist/worker.d.ts) with the TypeScript compiler; the methods; the defaults, units and off switch of
// a worker built with no options; the removed shapes refused; and every event a run emits carrying
// exactly its type's fields. An option or field renamed, missing or added fails here.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import ts from 'typescript';
import { connect, Worker } from '@fenecdb/web/client';

const CONTRACT = JSON.parse(readFileSync(new URL('../../../conformance/worker-contract.json', import.meta.url), 'utf8'));
const DTS = new URL('../dist/worker.d.ts', import.meta.url);
const sorted = (xs) => [...xs].sort();

/** The declarations of dist/worker.d.ts: each interface's and class's public member names. */
function declarations() {
  const source = ts.createSourceFile('worker.d.ts', readFileSync(DTS, 'utf8'), ts.ScriptTarget.ES2022, true);
  const found = {};
  for (const node of source.statements) {
    if (!(ts.isInterfaceDeclaration(node) || ts.isClassDeclaration(node)) || !node.name) continue;
    const members = {};
    for (const m of node.members) {
      if (!m.name || ts.isPrivateIdentifier(m.name)) continue;
      if (ts.getCombinedModifierFlags(m) & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected)) continue;
      members[m.name.getText(source)] = m;
    }
    found[node.name.text] = { members, source };
  }
  return found;
}

const decl = declarations();
const jsField = (f) => f.names?.js ?? f.js;
const removedNames = CONTRACT.removed.js.map((r) => /^[A-Za-z]+/.exec(r)[0]);

test('WorkerOptions has exactly the contract\'s options and the deprecated names it allows', () => {
  const want = [...CONTRACT.options.map((o) => o.names.js), ...Object.keys(CONTRACT.deprecated.js)];
  assert.deepEqual(sorted(Object.keys(decl.WorkerOptions.members)), sorted(want));
  for (const name of removedNames) {
    if (want.includes(name)) continue;
    assert.ok(!(name in decl.WorkerOptions.members), `${name} was removed by the contract`);
  }
});

test('every duration option is milliseconds, named ...Ms; backoff answers milliseconds', () => {
  assert.match(CONTRACT.units.js, /milliseconds/);
  for (const o of CONTRACT.options.filter((o) => o.type === 'duration')) assert.match(o.names.js, /Ms$/, o.option);
  const backoff = decl.WorkerOptions.members.backoff;
  assert.equal(backoff.type.getText(decl.WorkerOptions.source), '(attempts: number) => number');
});

test('WorkerEvent has exactly the contract\'s fields, and its type exactly the contract\'s event types', () => {
  const fields = Object.values(CONTRACT.events.fields).map(jsField);
  assert.deepEqual(sorted(Object.keys(decl.WorkerEvent.members)), sorted(fields));
  const type = decl.WorkerEvent.members.type.type;
  assert.ok(ts.isUnionTypeNode(type), 'type is a union of the event types');
  const names = type.types.map((t) => t.literal.text);
  assert.deepEqual(sorted(names), sorted(Object.values(CONTRACT.events.type_names.js)));
  for (const [field, member] of Object.entries(decl.WorkerEvent.members)) {
    const required = field === 'type' || field === 'worker';
    assert.equal(member.questionToken === undefined, required, `${field} is ${required ? 'always there' : 'there where it applies'}`);
  }
});

test('the Worker has the contract\'s methods, and db.worker(queue, options) builds one', () => {
  for (const name of CONTRACT.method_names.js) {
    assert.ok(name in decl.Worker.members, `Worker.${name} is declared`);
    assert.equal(typeof Worker.prototype[name], 'function', `Worker.${name} is a method`);
  }
  assert.match(CONTRACT.constructor.js, /^db\.worker\(queue: string, options\?: WorkerOptions\)$/);
  const w = connect('http://db.invalid', { fetch: () => assert.fail('nothing is sent') }).worker('mail');
  assert.ok(w instanceof Worker);
  assert.equal(w.queue.collection, 'mail');
});

test('a worker built with no options has the contract\'s defaults; heartbeatMs: 0 is the off switch', () => {
  const db = connect('http://db.invalid', { fetch: () => assert.fail('nothing is sent') });
  const w = db.worker('jobs');
  for (const o of CONTRACT.options) {
    const name = o.names.js;
    if ('default_ms' in o) assert.equal(w[name], o.default_ms, name);
    else if (typeof o.default === 'number' || typeof o.default === 'boolean') assert.equal(w[name], o.default, name);
  }
  assert.match(w.name, /^w-[0-9a-f]{8}$/);
  const heartbeat = CONTRACT.options.find((o) => o.option === 'heartbeat');
  assert.equal(heartbeat.default, 'lease / 3');
  assert.equal(w.heartbeatMs, w.leaseMs / 3);
  assert.equal(heartbeat.off.js, 'heartbeatMs: 0');
  assert.equal(db.worker('jobs', { heartbeatMs: 0 }).heartbeatMs, 0);
  assert.equal(db.worker('jobs', { heartbeatMs: undefined }).heartbeatMs, 10000, `unset (${heartbeat.unset.js}): the default`);
  const backoff = CONTRACT.options.find((o) => o.option === 'backoff');
  assert.equal(backoff.default, 'attempts² seconds');
  assert.deepEqual([1, 2, 3].map((n) => w.delayFor(n)), [1000, 4000, 9000]);
});

test('the shapes the contract removed are refused, not silently ignored', () => {
  const db = connect('http://db.invalid', { fetch: () => assert.fail('nothing is sent') });
  assert.deepEqual(sorted(removedNames), ['backoffMs', 'heartbeat', 'retry']);
  for (const name of removedNames) assert.throws(() => db.worker('jobs', { [name]: 1 }), { name: 'FenecError' }, name);
});

test('every event a run emits has exactly its type\'s fields, named as the contract names them', async () => {
  // A fake server behind a replica (a `primary` event): the first claim takes four jobs (one to ack after a 503, one that throws, one past
  // its attempts, one whose ack is 412), the second two (the first stops the worker, the second is
  // given back), then claims hold until given up.
  let claims = 0;
  let acks = 0;
  const job = (id, attempts = 1) => ({ id, payload: {}, attempts });
  const fetch = async (url, init) => {
    const { query, params } = JSON.parse(init.body);
    if (!String(url).startsWith('http://primary.invalid/')) {
      // the worker is given a replica: its refusal names the primary (a `primary` event)
      return Response.json({ error: 'this server is a replica' }, { status: 403, headers: { 'fenec-primary': 'http://primary.invalid' } });
    }
    if (query.endsWith('returning *')) {
      claims++;
      if (claims === 1) return Response.json([job(1), job(2), job(3, 9), job(4)]);
      if (claims === 2) return Response.json([job(5), job(6)]);
      if (init.headers['fenec-wait'] === '0') return Response.json([]);
      return new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason), { once: true }));
    }
    if (query.startsWith('del ')) {
      acks++;
      if (acks === 1) return Response.json({ error: 'the server is starting' }, { status: 503 });
      if (params[0] === 4) return Response.json({ error: 'wrote 0 rows, and requires 1' }, { status: 412 });
    }
    return Response.json({ affected: 1 });
  };
  const events = [];
  const w = connect('http://db.invalid', { fetch })
    .worker('jobs', { name: 'w', batch: 4, retryMinMs: 1, retryMaxMs: 1, onEvent: (e) => events.push(e) });
  await w.run((j) => {
    if (j.id === 2) throw new Error('no such mailbox');
    if (j.id === 5) void w.stop();
  });
  const types = CONTRACT.events.types;
  const fieldName = (f) => jsField(CONTRACT.events.fields[f]);
  assert.deepEqual(sorted(new Set(events.map((e) => e.type))), sorted(Object.keys(types)), 'every event type was seen');
  for (const e of events) {
    const want = types[e.type].fields.map(fieldName);
    const optional = (e.type === 'retry' && e.id !== undefined ? types.retry.job_fields_when_of_a_job : []).map(fieldName);
    const got = Object.keys(e).filter((k) => k !== 'type' && e[k] !== undefined);
    assert.deepEqual(sorted(got), sorted([...want, ...optional]), JSON.stringify(e));
    if (e.error !== undefined) assert.equal(typeof e.error, 'string');
    assert.equal(e.worker, 'w');
  }
  assert.equal(events.at(-1).type, 'stopped');
});
