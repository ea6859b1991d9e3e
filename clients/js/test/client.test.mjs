// The client over a capture fetch (no server): what goes over the wire, what comes back, and how
// a refusal, a cancellation and a timeout surface.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, from, raw, expr, inc, FenecError } from '@fenecdb/web/client';
import { captureFetch } from './capture.mjs';

const claimChain = (db) => db.from('jobs').where(raw('run_at <= now()')).order('run_at').limit(10);
const claimPatch = { owner: 'w1:1', run_at: expr('now() + ?', 30000), attempts: inc(1) };

test('a statement goes as one JSON POST /query with its token', async () => {
  const cap = captureFetch(() => [{ id: 1 }]);
  const db = connect('http://db.invalid:8080/', { token: 's3cret', fetch: cap.fetch });
  assert.deepEqual(await db.from('jobs').where('id', 1).rows(), [{ id: 1 }]);
  const [req] = cap.sent;
  assert.equal(req.url, 'http://db.invalid:8080/query');
  assert.equal(req.method, 'POST');
  assert.equal(req.headers['content-type'], 'application/json');
  assert.equal(req.headers.authorization, 'Bearer s3cret');
  assert.equal(req.headers['fenec-wait'], undefined);
  assert.equal(req.headers['idempotency-key'], undefined);
  assert.deepEqual(JSON.parse(req.body), { query: 'get jobs where id = $1', params: [1] });
});

test('wait goes as Fenec-Wait and never changes the text', async () => {
  const cap = captureFetch();
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  const rows = await claimChain(db).update(claimPatch, { returning: true, wait: 30000 });
  assert.deepEqual(rows, []);
  assert.equal(cap.sent[0].headers['fenec-wait'], '30000');
  assert.deepEqual([cap.sent[0].text, cap.sent[0].params], claimChain(db).toUpdate(claimPatch, { returning: true }));
  await db.run('del jobs where id = $1', [1], { wait: 0 });
  assert.equal(cap.sent[1].headers['fenec-wait'], '0');
});

test('a wait that is not a whole number from 0 is refused before sending', async () => {
  const cap = captureFetch();
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  for (const bad of [-1, 1.5, '100', NaN]) {
    await assert.rejects(claimChain(db).update(claimPatch, { wait: bad }), (e) => {
      assert.ok(e instanceof FenecError);
      assert.equal(e.status, undefined);
      assert.equal(e.message, `wait is milliseconds, a whole number from 0 (got ${bad === '100' ? '"100"' : bad})`);
      return true;
    });
    await assert.rejects(db.run('get jobs', [], { wait: bad }), FenecError);
  }
  assert.equal(cap.sent.length, 0);
});

test('writes answer their count, or their rows with returning', async () => {
  const cap = captureFetch((req) => (/ returning /.test(req.text) ? [{ id: 4 }] : { affected: 2 }));
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  const q = db.from('jobs');
  assert.equal(await q.insert([{ a: 1 }, { a: 2 }]), 2);
  assert.equal(await q.where('a', 1).update({ a: 3 }), 2);
  assert.deepEqual(await q.where('a', 1).update({ a: 3 }, { returning: ['id'] }), [{ id: 4 }]);
  assert.deepEqual(await q.limit(1).delete({ returning: true }), [{ id: 4 }]);
  assert.equal(await q.where('a', 1).delete(), 2);
  assert.equal(cap.sent.length, 5);
});

test('insert([]) sends nothing and answers 0', async () => {
  const cap = captureFetch();
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  assert.equal(await db.from('jobs').insert([]), 0);
  assert.equal(cap.sent.length, 0);
});

test('first and count send the read their rules give', async () => {
  const cap = captureFetch((req) => (req.text.endsWith(' count') ? [{ count: 7 }] : [{ id: 9 }, { id: 10 }]));
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  assert.deepEqual(await db.from('jobs').where('id', 9).limit(50).first(), { id: 9 });
  assert.equal(cap.sent[0].text, 'get jobs where id = $1 limit 1');
  assert.equal(await db.from('jobs').where('owner', null).count(), 7);
  assert.equal(cap.sent[1].text, 'get jobs where owner is null count');
  const none = connect('http://db.invalid', { fetch: captureFetch(() => []).fetch });
  assert.equal(await none.from('jobs').first(), null);
});

test('a server refusal is a FenecError with its status, code and message', async () => {
  const answers = {
    400: 'expected a statement',
    401: 'a token is required',
    403: 'the server is in read-only mode',
    404: 'no collection `nope`',
    409: 'id 1 is taken',
    412: '`del jobs` wrote 0 rows, and requires 1',
    422: 'this Idempotency-Key came with another request: a key is for one',
    503: 'too many connections',
    500: 'the disk refused a write',
  };
  const codes = { 400: 'bad_request', 401: 'unauthorized', 403: 'forbidden', 404: 'not_found', 409: 'conflict', 412: 'unmet', 422: 'key_reused', 503: 'unavailable', 500: 'http_500' };
  for (const [status, error] of Object.entries(answers)) {
    const cap = captureFetch(() => ({ status: Number(status), body: { error } }));
    const db = connect('http://db.invalid', { fetch: cap.fetch });
    await assert.rejects(db.from('jobs').where('id', 1).delete({ require: 1 }), (e) => {
      assert.ok(e instanceof FenecError && e instanceof Error);
      assert.equal(e.status, Number(status));
      assert.equal(e.code, codes[status]);
      assert.equal(e.message, error);
      assert.equal(e.at, undefined);
      return true;
    });
  }
});

test('a refused batch carries at and completed', async () => {
  const cap = captureFetch(() => ({ status: 412, body: { error: 'unmet: `set a` wrote 0 rows, and requires 1', completed: 0, at: 1 } }));
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  await assert.rejects(db.batch(['get a', ['set a {x: $1} where id = $2 require 1', [1, 2]]]), (e) => {
    assert.equal(e.status, 412);
    assert.equal(e.code, 'unmet');
    assert.equal(e.at, 1);
    assert.equal(e.completed, 0);
    return true;
  });
});

test('a batch goes as NDJSON, one statement a line, from queries, texts and tuples', async () => {
  const cap = captureFetch(() => ({ ok: 3, results: [{ rows: [] }, { affected: 1 }, { affected: 0 }] }));
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  const jobs = db.from('jobs');
  const r = await db.batch([jobs.where('id', 1), 'del jobs where id = 2', jobs.where('id', 3).toDelete({ require: 0 })], { idempotencyKey: 'b-1' });
  assert.deepEqual(r.results, [{ rows: [] }, { affected: 1 }, { affected: 0 }]);
  const req = cap.sent[0];
  assert.equal(req.url, 'http://db.invalid/batch');
  assert.equal(req.headers['content-type'], 'application/x-ndjson');
  assert.equal(req.headers['idempotency-key'], 'b-1');
  assert.deepEqual(req.body.trim().split('\n').map((l) => JSON.parse(l)), [
    { query: 'get jobs where id = $1', params: [1] },
    { query: 'del jobs where id = 2', params: [] },
    { query: 'del jobs where id = $1 require 0', params: [3] },
  ]);
  await assert.rejects(db.batch([]), /a batch holds at least one statement/);
});

test('seq is the highest Fenec-Seq seen, shared with keyed copies; replayed is read from the answer', async () => {
  let seq = 5;
  let replay = false;
  const cap = captureFetch(() => ({ status: 200, body: { affected: 1 }, headers: { 'fenec-seq': String(seq), ...(replay ? { 'idempotent-replayed': 'true' } : {}) } }));
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  assert.equal(db.seq, undefined);
  const keyed = db.withIdempotencyKey('k-1');
  assert.equal(await keyed.from('jobs').where('id', 1).delete(), 1);
  assert.equal(cap.sent[0].headers['idempotency-key'], 'k-1');
  assert.equal(db.seq, 5);
  seq = 3;
  replay = true;
  const r = await db.run('del jobs where id = $1', [1]);
  assert.deepEqual(r, { kind: 'affected', count: 1, seq: 3, replayed: true });
  assert.equal(db.seq, 5, 'the highest seen stays');
  assert.equal(keyed.seq, 5);
  assert.equal(keyed.replayed, true);
  assert.equal(cap.sent[1].headers['idempotency-key'], undefined, 'the base client carries no key');
});

test('an empty idempotency key is refused', () => {
  const db = connect('http://db.invalid', { fetch: captureFetch().fetch });
  assert.throws(() => db.withIdempotencyKey(''), { message: 'an idempotency key is a text, not empty' });
  assert.rejects(db.run('get a', [], { idempotencyKey: '' }), { message: 'an idempotency key is a text, not empty' });
});

test('run answers rows, a count or a message by the answer\'s shape', async () => {
  const bodies = [[{ id: 1 }], { affected: 2 }, { message: 'collection t created' }];
  let k = 0;
  const db = connect('http://db.invalid', { fetch: captureFetch(() => bodies[k++]).fetch });
  assert.deepEqual(await db.run('get t'), { kind: 'rows', rows: [{ id: 1 }], seq: undefined, replayed: false });
  assert.deepEqual(await db.run('del t where id = $1', [1]), { kind: 'affected', count: 2, seq: undefined, replayed: false });
  assert.deepEqual(await db.run('create collection t (x int)'), { kind: 'message', message: 'collection t created', seq: undefined, replayed: false });
});

/** A fetch that answers only when its signal aborts, as a held claim with no job does. */
function hangingFetch() {
  const calls = [];
  const fetch = (url, init) =>
    new Promise((resolve, reject) => {
      const call = { url, init, started: performance.now() };
      calls.push(call);
      init.signal?.addEventListener('abort', () => {
        call.ended = performance.now();
        reject(init.signal.reason);
      }, { once: true });
    });
  return { fetch, calls };
}

test('aborting the signal gives the request up with an AbortError', async () => {
  const f = hangingFetch();
  const db = connect('http://db.invalid', { fetch: f.fetch });
  const ctl = new AbortController();
  const claim = claimChain(db).update(claimPatch, { returning: true, wait: 30000, signal: ctl.signal });
  setTimeout(() => ctl.abort(), 20);
  await assert.rejects(claim, (e) => e.name === 'AbortError' && !(e instanceof FenecError));
  assert.equal(f.calls.length, 1);
});

test('with a timeout of its own, a held claim is bounded by the timeout plus its wait', async () => {
  const f = hangingFetch();
  const db = connect('http://db.invalid', { fetch: f.fetch, timeout: 50 });
  const t0 = performance.now();
  await assert.rejects(db.from('jobs').where('id', 1).rows(), (e) => e.name === 'TimeoutError');
  const plain = performance.now() - t0;
  assert.ok(plain >= 45 && plain < 10000, `a plain request gave up after ${plain} ms`);
  const t1 = performance.now();
  await assert.rejects(claimChain(db).update(claimPatch, { returning: true, wait: 250 }), (e) => e.name === 'TimeoutError');
  const held = performance.now() - t1;
  assert.ok(held >= 295, `a held claim with wait 250 gave up after ${held} ms, before timeout + wait`);
  // The caller's signal still works beside the client's timeout.
  const ctl = new AbortController();
  setTimeout(() => ctl.abort(), 10);
  await assert.rejects(claimChain(db).update(claimPatch, { wait: 5000, signal: ctl.signal }), (e) => e.name === 'AbortError');
});

test('a query with no connection refuses to run', async () => {
  await assert.rejects(from('jobs').rows(), (e) => e instanceof FenecError && e.status === undefined && /db\.from\('jobs'\)/.test(e.message));
});

test('a query is immutable: a base query starts many chains', () => {
  const base = from('jobs').where('queue', 'mail');
  const a = base.where('attempts', '<', 3).order('id').limit(2);
  const b = base.orWhere('owner', null);
  assert.deepEqual(base.toFenecQL(), ['get jobs where queue = $1', ['mail']]);
  assert.deepEqual(a.toFenecQL(), ['get jobs where queue = $1 and attempts < $2 order id asc limit 2', ['mail', 3]]);
  assert.deepEqual(b.toFenecQL(), ['get jobs where queue = $1 or owner is null', ['mail']]);
  assert.deepEqual(base.toFenecQL(), ['get jobs where queue = $1', ['mail']]);
});

test('a Map keeps any key order, integer-like keys included', () => {
  const doc = new Map([['b', 1], ['a', 2]]);
  assert.deepEqual(from('t').toInsert(doc), ['put t {b: $1, a: $2}', [1, 2]]);
  assert.deepEqual(from('t').where(new Map([['z', 1], ['y', { lt: 2 }]])).toFenecQL(), ['get t where z = $1 and y < $2', [1, 2]]);
});

test('connect refuses what is not an http URL', () => {
  assert.throws(() => connect('127.0.0.1:8080'), FenecError);
  assert.throws(() => connect('http://x', { timeout: -1 }), FenecError);
});

test('a batch read is {rows}, even from a server that answers the bare array', async () => {
  const cap = captureFetch(() => ({ ok: 2, results: [[{ x: 1 }], { rows: [{ x: 2 }] }] }));
  const db = connect('http://db.invalid', { fetch: cap.fetch });
  const r = await db.batch(['get a', 'get b']);
  assert.deepEqual(r.results, [{ rows: [{ x: 1 }] }, { rows: [{ x: 2 }] }]);
});
