// The client against a live fenec-server: refusals with their statuses, held claims and giving
// them up, the client's timeout plus the wait, idempotent retries, batches, the worker helper,
// and the scenario runner on the spec's example scenarios.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { connect, raw, expr, inc, FenecError } from '@fenecdb/web/client';
import { runScenarios } from './conformance/scenarios.mjs';
import { liveServer, skip } from './live.mjs';

const server = liveServer();
let n = 0;
const SCHEMA = '(payload json, run_at timestamp @sorted, owner text, attempts int, error text)';

async function queue(db) {
  const name = `q${++n}`;
  await db.run(`create collection ${name} ${SCHEMA}`);
  return name;
}
const enqueue = (db, q, payloads, delay = 0) =>
  db.from(q).insert(payloads.map((payload) => ({ payload, run_at: expr('now() + ?', delay), attempts: 0 })));
const claim = (db, q, owner, options = {}) =>
  db.from(q).where(raw('run_at <= now()')).order('run_at').limit(options.limit ?? 10)
    .update({ owner, run_at: expr('now() + ?', options.lease ?? 30000), attempts: inc(1) }, { returning: true, ...options.write });
const refused = (status, code, message) => (e) => {
  assert.ok(e instanceof FenecError, String(e));
  assert.equal(e.status, status);
  assert.equal(e.code, code);
  if (message) assert.match(e.message, message);
  return true;
};

test('refusals arrive with their status and code', { skip }, async () => {
  const db = connect(server.url);
  const q = await queue(db);
  await assert.rejects(db.run('get'), refused(400, 'bad_request'));
  await assert.rejects(db.from('nowhere').rows(), refused(404, 'not_found'));
  await assert.rejects(db.run(`create collection ${q} (x int)`), refused(409, 'conflict'));
  await assert.rejects(db.from(q).where('id', 99).where('owner', 'w').delete({ require: 1 }), refused(412, 'unmet', /requires 1/));
  await assert.rejects(claim(db, q, 'w', { write: { wait: 10 } }).then(() => db.from(q).insert({ payload: 1, run_at: expr('now()'), attempts: 0 }, { wait: 100 })),
    refused(400, 'bad_request', /writes otherwise/));
});

test('a write moves seq on; a keyed retry is replayed, another request under the key is 422', { skip }, async () => {
  const db = connect(server.url);
  const q = await queue(db);
  await enqueue(db, q, ['a', 'b']);
  const before = db.seq;
  assert.ok(before > 0);
  const keyed = db.withIdempotencyKey(`claim-${q}`);
  const first = await claim(keyed, q, 'w1:1', { limit: 1 });
  assert.equal(db.replayed, false);
  assert.ok(db.seq > before);
  const again = await claim(keyed, q, 'w1:1', { limit: 1 });
  assert.equal(db.replayed, true);
  assert.deepEqual(again, first);
  assert.equal(await db.from(q).where('owner', null).count(), 1, 'the retry took nothing');
  await assert.rejects(claim(keyed, q, 'w1:2', { limit: 1 }), refused(422, 'key_reused'));
});

test('a held claim is answered the moment a job comes', { skip }, async () => {
  const db = connect(server.url);
  const q = await queue(db);
  const t0 = performance.now();
  const held = claim(db, q, 'w1:1', { write: { wait: 30000 } });
  setTimeout(() => enqueue(connect(server.url), q, ['late']), 200);
  const rows = await held;
  const took = performance.now() - t0;
  assert.deepEqual(rows.map((r) => r.payload), ['late']);
  assert.ok(took >= 190 && took < 15000, `answered after ${took} ms, not at its 30 s deadline`);
});

test('aborting a held claim gives it up: the job goes to the next waiting worker', { skip }, async () => {
  const a = connect(server.url);
  const b = connect(server.url);
  const q = await queue(a);
  const ctl = new AbortController();
  const first = claim(a, q, 'a:1', { write: { wait: 10000, signal: ctl.signal } });
  await new Promise((r) => setTimeout(r, 100));
  const second = claim(b, q, 'b:1', { write: { wait: 10000 } });
  await new Promise((r) => setTimeout(r, 100));
  const t0 = performance.now();
  ctl.abort();
  await assert.rejects(first, (e) => e.name === 'AbortError');
  assert.ok(performance.now() - t0 < 5000, 'the abort is at once, not at the 10 s deadline');
  await enqueue(a, q, ['job']);
  const rows = await second;
  assert.deepEqual(rows.map((r) => [r.owner, r.payload]), [['b:1', 'job']]);
});

test('a client timeout is extended by the wait: a held claim ends at its wait, not at the timeout', { skip }, async () => {
  const db = connect(server.url, { timeout: 300 });
  const q = await queue(db);
  const t0 = performance.now();
  assert.deepEqual(await claim(db, q, 'w:1', { write: { wait: 800 } }), []);
  const took = performance.now() - t0;
  assert.ok(took >= 750, `the empty wait ended after ${took} ms`);
});

test('a batch lands whole or not at all, and a refusal names the statement', { skip }, async () => {
  const db = connect(server.url);
  const q = await queue(db);
  await enqueue(db, q, ['a']);
  await assert.rejects(
    db.batch([db.from(q).where('id', 1).toUpdate({ owner: 'x' }), db.from(q).where('id', 7).toDelete({ require: 1 })]),
    (e) => refused(412, 'unmet')(e) && e.at === 1 && e.completed === 0,
  );
  assert.equal(await db.from(q).where('owner', null).count(), 1, 'the first statement was put back');
  const r = await db.batch([db.from(q).where('id', 1).toUpdate({ owner: 'x' }), db.from(q).select('owner')]);
  assert.deepEqual(r.results, [{ affected: 1 }, { rows: [{ owner: 'x' }] }]);
  assert.equal(r.seq, db.seq);
});

test('values go and come back: dates, json, lists', { skip }, async () => {
  const db = connect(server.url);
  await db.run('create collection vals (at timestamp, doc json, tags [text])');
  const at = new Date('2025-03-01T08:00:00.250Z');
  await db.from('vals').insert({ at, doc: { to: 'ada', n: [1, 2.5] }, tags: ['a', 'b'] });
  const row = await db.from('vals').where('at', '<', new Date('2025-03-02T00:00:00Z')).where('tags', 'has', 'b').first();
  assert.equal(row.at, '2025-03-01T08:00:00.250Z');
  assert.deepEqual(row.doc, { to: 'ada', n: [1, 2.5] });
  assert.equal(await db.from('vals').insert([]), 0);
});

test('the worker helper: heartbeat keeps a slow job, fail backs off, stop ends a held claim', { skip, timeout: 20000 }, async () => {
  const db = connect(server.url);
  const q = await queue(db);
  await enqueue(db, q, [{ n: 1 }, { n: 2 }]);
  const w1 = db.worker(q, { name: 'w1', batch: 1, leaseMs: 300, waitMs: 2000, backoff: () => 100000 });
  const w2 = db.worker(q, { name: 'w2', batch: 1, leaseMs: 300, waitMs: 0 });
  assert.deepEqual(w1.toClaim('w1:9'), [
    `set ${q} {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3} where run_at <= now() order run_at asc limit 1 returning *`,
    ['w1:9', 300, 1],
  ]);
  const it = w1[Symbol.asyncIterator]();
  const { value: slow } = await it.next();
  assert.equal(slow.owner, 'w1:1');
  assert.deepEqual(slow.payload, { n: 1 });
  await new Promise((r) => setTimeout(r, 900)); // three leases: the heartbeat extends it meanwhile
  const other = await w2.claim();
  assert.deepEqual(other.map((j) => j.payload), [{ n: 2 }], 'w2 takes only the job nobody holds');
  assert.equal(await slow.ack(), true);
  assert.equal(await other[0].fail('bounced'), true);
  assert.equal(await other[0].ack(), false, 'a job failed back is no longer the owner\'s: 412 is false');
  assert.equal(other[0].lost, true);
  // w1 now holds a claim at the server (nothing is ready); stop gives it up at once.
  const next = it.next();
  await new Promise((r) => setTimeout(r, 100));
  const t0 = performance.now();
  w1.stop();
  assert.deepEqual(await next, { value: undefined, done: true });
  assert.ok(performance.now() - t0 < 300, 'stop ends the held claim at once');
  const [row] = await db.from(q).rows();
  assert.equal(row.error, 'bounced');
  assert.equal(row.owner, null);
});

test('the scenario runner passes the spec\'s example scenarios', { skip, timeout: 60000 }, async () => {
  const lines = [];
  const file = fileURLToPath(new URL('./testdata/scenarios-sample.json', import.meta.url));
  const r = await runScenarios(file, { url: server.url, requireServer: true, log: (l) => lines.push(l) });
  assert.deepEqual(lines.filter((l) => l.startsWith('FAIL')), []);
  assert.deepEqual(r, { passed: 5, failed: 0, skipped: 0 });
});

test('the scenario runner fails a scenario whose expectation is not met', { skip, timeout: 20000 }, async () => {
  const { writeFileSync, mkdirSync } = await import('node:fs');
  const dir = fileURLToPath(new URL('./.tmp/', import.meta.url));
  mkdirSync(dir, { recursive: true });
  const file = `${dir}wrong-scenarios.json`;
  writeFileSync(file, JSON.stringify({ format: 1, scenarios: [
    { name: 'expects a job the queue does not have', kind: 'script', prefix: 'wrong', steps: [
      { enqueue: [{ key: 'a' }] },
      { claim: { worker: 'w1', batch: 5, lease_ms: 1000 }, expect: { keys: ['a', 'b'] } },
    ] },
    { name: 'expects an ack to be refused', kind: 'script', prefix: 'wrong', steps: [
      { enqueue: [{ key: 'a' }] },
      { claim: { worker: 'w1', batch: 1, lease_ms: 1000 } },
      { ack: { key: 'a', worker: 'w1' }, expect: 'unmet' },
    ] },
  ] }));
  const lines = [];
  const r = await runScenarios(file, { url: server.url, log: (l) => lines.push(l) });
  assert.deepEqual(r, { passed: 0, failed: 2, skipped: 0 });
  assert.match(lines[0], /^FAIL expects a job the queue does not have: step 2 claim keys: \["a","b"\] \/ \["a"\]$/);
  assert.match(lines[1], /^FAIL expects an ack to be refused: step 3 ack a: unmet \/ ok$/);
});

test('without FENEC_URL every scenario is skipped; with FENEC_REQUIRE_SERVER the run fails', async () => {
  const file = fileURLToPath(new URL('./testdata/scenarios-sample.json', import.meta.url));
  const lines = [];
  assert.deepEqual(await runScenarios(file, { log: (l) => lines.push(l) }), { passed: 0, failed: 0, skipped: 5 });
  assert.match(lines[0], /^skipped .*: FENEC_URL not set$/);
  assert.deepEqual(await runScenarios(file, { requireServer: true, log: () => {} }), { passed: 0, failed: 1, skipped: 5 });
});
