// The worker helper over a capture fetch: the statements it sends are the spec's, and its
// stale answers, keys and stop behave as documented.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, FenecError } from '@fenecdb/web/client';
import { captureFetch } from './capture.mjs';

const row = (id, attempts = 1) => ({ id, payload: { to: `u${id}` }, attempts });

test('claim, ack, extend and fail write the queue\'s statements', async () => {
  const answers = [[row(41), row(42)], { affected: 1 }, { affected: 1 }, { affected: 1 }];
  const cap = captureFetch(() => answers.shift());
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  const w = db.worker('mail_jobs', { name: 'w9', batch: 5, leaseMs: 60000, waitMs: 20000, deadAfter: 5, backoff: (n) => 1000 * n * n });
  const jobs = await w.claim();
  assert.deepEqual(jobs.map((j) => [j.id, j.owner, j.attempts]), [[41, 'w9:1', 1], [42, 'w9:1', 1]]);
  assert.equal(await jobs[0].ack(), true);
  assert.equal(await jobs[1].extend(), true);
  assert.equal(await jobs[1].fail('timeout'), true);
  assert.deepEqual(cap.sent.map((s) => [s.text, s.params]), [
    ['set mail_jobs {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3} where run_at <= now() order run_at asc limit 5 returning *', ['w9:1', 60000, 1]],
    ['del mail_jobs where id = $1 and owner = $2 require 1', [41, 'w9:1']],
    ['set mail_jobs {run_at: now() + $1} where id = $2 and owner = $3 require 1', [60000, 42, 'w9:1']],
    ['set mail_jobs {owner: $1, error: $2, run_at: case when attempts >= $3 then null else now() + $4 end} where id = $5 and owner = $6 require 1', [null, 'timeout', 5, 1000, 42, 'w9:1']],
  ]);
  assert.equal(cap.sent[0].headers['fenec-wait'], '20000');
  assert.deepEqual(jobs[0].toAck(), [cap.sent[1].text, cap.sent[1].params]);
  assert.deepEqual(w.toClaim('w9:1'), [cap.sent[0].text, cap.sent[0].params]);
});

test('each claim has an owner token of its own, sent under the key claim:<owner>@<instance> unless given another', async () => {
  const cap = captureFetch(() => []);
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  const w = db.worker('jobs', { name: 'w1' });
  await w.claim();
  await w.claim({ idempotencyKey: 'claim-7', wait: 0 });
  assert.deepEqual(cap.sent.map((s) => s.params[0]), ['w1:1', 'w1:2']);
  assert.match(cap.sent[0].headers['idempotency-key'], /^claim:w1:1@[0-9a-f]{8}$/);
  assert.equal(cap.sent[1].headers['idempotency-key'], 'claim-7');
  assert.equal(cap.sent[1].headers['fenec-wait'], '0');
});

test('a 412 on ack, extend or fail is false (stale); other refusals throw', async () => {
  let answer = [row(1)];
  const cap = captureFetch(() => answer);
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  const [job] = await db.worker('jobs').claim();
  answer = { status: 412, body: { error: '`del jobs` wrote 0 rows, and requires 1' } };
  assert.equal(await job.ack(), false);
  assert.equal(job.lost, true);
  answer = { status: 404, body: { error: 'no collection `jobs`' } };
  await assert.rejects(job.extend(), (e) => e instanceof FenecError && e.status === 404);
});

test('stop gives a held claim up and ends the iteration', async () => {
  // Held claims wait until given up; the one sent again with no wait on stop answers no job.
  const fetch = (url, init) => init.headers['fenec-wait'] === '0'
    ? Promise.resolve(Response.json([]))
    : new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason)));
  const db = connect('http://db.invalid', { fetch });
  const w = db.worker('jobs', { waitMs: 30000 });
  const seen = [];
  const loop = (async () => { for await (const job of w) seen.push(job); })();
  await new Promise((r) => setTimeout(r, 20));
  w.stop();
  await loop;
  assert.deepEqual(seen, []);
  assert.equal(w.stopped, true);
  assert.deepEqual(await w.claim(), [], 'a stopped worker claims nothing');
});

test('the worker\'s numbers are checked', () => {
  const db = connect('http://db.invalid', { fetch: captureFetch().fetch });
  assert.throws(() => db.worker('jobs', { batch: 0 }), { message: 'batch is a whole number from 1 (got 0)' });
  assert.throws(() => db.worker('jobs', { leaseMs: 1.5 }), FenecError);
  assert.throws(() => db.worker('bad name'), { message: 'invalid collection name: "bad name"' });
  assert.throws(() => db.worker('jobs', { retryMinMs: 200, retryMaxMs: 100 }), { message: 'retryMaxMs is a whole number from 200 (got 100)' });
  assert.equal(db.worker('jobs', { heartbeatMs: 0 }).heartbeatMs, 0, 'heartbeatMs: 0 turns the heartbeat off');
  assert.equal(db.worker('jobs', { leaseMs: 9000 }).heartbeatMs, 3000, 'unset, a third of the lease');
});

test('the options the contract replaced are refused by name, not ignored', () => {
  const db = connect('http://db.invalid', { fetch: captureFetch().fetch });
  assert.throws(() => db.worker('jobs', { retry: { initialMs: 1 } }), { message: /retryMinMs and retryMaxMs/ });
  assert.throws(() => db.worker('jobs', { heartbeat: false }), { message: /heartbeatMs: 0/ });
  assert.throws(() => db.worker('jobs', { backoffMs: 1000 }), { message: /backoff, a function/ });
});

test('a claim given up by stop is sent again with no wait under its key, and what it took is given back', async () => {
  const sent = [];
  const fetch = async (url, init) => {
    const { query, params } = JSON.parse(init.body);
    sent.push({ query, params, key: init.headers['idempotency-key'], wait: init.headers['fenec-wait'] });
    if (!query.endsWith('returning *')) return Response.json({ affected: 1 });
    // the server ran the held claim just as the worker gave it up: its key answers the job it took
    if (init.headers['fenec-wait'] === '0') return Response.json([{ id: 5, payload: {}, attempts: 1 }]);
    return new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason)));
  };
  const events = [];
  const db = connect('http://db.invalid', { fetch });
  const w = db.worker('jobs', { name: 'w', waitMs: 30000, onEvent: (e) => events.push(e) });
  const run = w.run(() => assert.fail('no job runs after stop'));
  while (sent.length === 0) await new Promise((r) => setTimeout(r, 5));
  await w.stop();
  await run;
  assert.deepEqual(sent.map((s) => [s.wait, s.params[0]]), [['30000', 'w:1'], ['0', 'w:1'], [undefined, null]]);
  assert.equal(sent[0].key, sent[1].key);
  assert.equal(sent[2].query, 'set jobs {owner: $1, run_at: now(), attempts: coalesce(attempts, 0) + $2} where id = $3 and owner = $4');
  assert.deepEqual(sent[2].params, [null, -1, 5, 'w:1']);
  assert.deepEqual(events.map((e) => [e.type, e.id, e.worker]), [['released', 5, 'w'], ['stopped', undefined, 'w']]);
});
