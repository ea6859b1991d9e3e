// A client given a replica, or a list of servers (docs/clients.md, "Replicas and failover"): what each
// answer makes it do, over a fake fetch. No server needed; the live cases are test/conformance/replicas.mjs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, raw, expr, inc, FenecError } from '@fenecdb/web/client';

const P = 'http://p.test:8080';
const R = 'http://r.test:8080';
const S = 'http://s.test:8080';

const refused = () => {
  throw new TypeError('fetch failed', { cause: Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }) });
};
const reset = () => {
  throw new TypeError('fetch failed', { cause: Object.assign(new Error('other side closed'), { code: 'UND_ERR_SOCKET' }) });
};
const json = (body, status = 200, headers = {}) => Response.json(body, { status, headers });
const ok = () => json({ affected: 1 }, 200, { 'fenec-seq': '7' });
/** A replica: reads answered, anything else refused 403 naming `primary`. */
const replicaOf = (primary) => (req) =>
  req.text.startsWith('get ')
    ? json([], 200, { 'fenec-primary': primary })
    : json({ error: `this server is a replica: send writes and claims to its primary, ${primary}` }, 403, { 'fenec-primary': primary });

/** A fetch answering by server: `answers[base](req)`; every request recorded with its server. */
function byServer(answers) {
  const sent = [];
  const fetch = async (url, init) => {
    const base = String(url).replace(/\/(query|batch)$/, '');
    const { query } = JSON.parse(init.body.split('\n')[0]);
    const req = { server: base, text: query, headers: init.headers };
    sent.push(req);
    return answers[base](req);
  };
  return { fetch, sent, servers: () => sent.map((r) => r.server) };
}

const claim = (db, wait = 5000) =>
  db.from('jobs').where(raw('run_at <= now()')).order('run_at').limit(10)
    .update({ owner: 'w:1', run_at: expr('now() + ?', 30000), attempts: inc(1) }, { returning: true, wait });

test("a replica's refusal naming its primary sends the same request there at once, a held claim too", async () => {
  const f = byServer({ [R]: replicaOf(P), [P]: (req) => (req.text.startsWith('set ') ? json([{ id: 1 }]) : ok()) });
  const db = connect(R, { fetch: f.fetch });
  assert.deepEqual(await claim(db), [{ id: 1 }]);
  assert.deepEqual(f.servers(), [R, P]);
  assert.equal(f.sent[1].text, f.sent[0].text);
  assert.equal(f.sent[1].headers['fenec-wait'], '5000');
  assert.equal(db.url, P);
  assert.deepEqual(db.servers, [R, P]);
  await db.from('jobs').insert({ payload: 1 });
  assert.deepEqual(f.servers(), [R, P, P]);
});

test('a 403 without the header is an ordinary 403', async () => {
  const f = byServer({ [R]: () => json({ error: "outside the token's rules" }, 403) });
  const db = connect([R, P], { fetch: f.fetch });
  await assert.rejects(db.run('put jobs {payload: 1}'), (e) => e instanceof FenecError && e.status === 403);
  assert.deepEqual(f.servers(), [R]);
  assert.equal(db.url, R);
});

test('refusals are followed two hops at most', async () => {
  const f = byServer({ [R]: replicaOf(S), [S]: replicaOf(R) });
  const db = connect(R, { fetch: f.fetch });
  await assert.rejects(db.run('put jobs {payload: 1}'), (e) => e instanceof FenecError && e.status === 403);
  assert.deepEqual(f.servers(), [R, S, R]);
});

test('a refused connection moves to the next server of the list, which stays the primary', async () => {
  const f = byServer({ [P]: refused, [R]: ok });
  const db = connect([P, R], { fetch: f.fetch });
  assert.equal((await db.run('put jobs {payload: 1}')).kind, 'affected');
  assert.deepEqual(f.servers(), [P, R]);
  assert.equal(db.url, R);
  await db.run('put jobs {payload: 2}');
  assert.deepEqual(f.servers(), [P, R, R]);
});

test('the list goes round, and the call fails as before once every server failed', async () => {
  const answers = { [P]: refused, [R]: refused, [S]: ok };
  const f = byServer(answers);
  const db = connect([R, S, P], { fetch: f.fetch });
  await db.run('put jobs {payload: 1}');
  assert.deepEqual(f.servers(), [R, S]);
  answers[S] = refused;
  await assert.rejects(db.run('put jobs {payload: 2}'), TypeError);
  assert.deepEqual(f.servers().slice(2), [S, P, R]);
});

test('a request sent whose answer was lost is not sent elsewhere', async () => {
  const f = byServer({ [P]: reset, [R]: ok });
  const db = connect([P, R], { fetch: f.fetch });
  await assert.rejects(db.run('put jobs {payload: 1}'), TypeError);
  assert.deepEqual(f.servers(), [P]);
  assert.equal(db.url, P);
});

test('a refusal naming a server this call could not reach fails the call as unreachable', async () => {
  const f = byServer({ [P]: refused, [R]: replicaOf(P) });
  const db = connect([P, R], { fetch: f.fetch });
  await assert.rejects(claim(db), TypeError);
  assert.deepEqual(f.servers(), [P, R]);
});

test('a 503 with Retry-After sends the next call to the next server', async () => {
  const f = byServer({ [P]: () => json({ error: 'no primary' }, 503, { 'retry-after': '1' }), [R]: ok });
  const db = connect([P, R], { fetch: f.fetch });
  await assert.rejects(db.run('put jobs {payload: 1}'), (e) => e instanceof FenecError && e.status === 503);
  await db.run('put jobs {payload: 2}');
  assert.deepEqual(f.servers(), [P, R]);
});

test('reads where told go to a replica after the last write seen; a text goes to the primary unless it says it reads', async () => {
  const f = byServer({ [P]: ok, [R]: () => json([{ id: 1 }]) });
  const db = connect([P, R], { fetch: f.fetch, readFrom: 'replica' });
  await db.from('jobs').where('id', 1).rows();
  assert.equal(f.sent.at(-1).server, R);
  assert.equal(f.sent.at(-1).headers['fenec-after'], undefined);
  await db.from('jobs').insert({ payload: 1 });
  assert.equal(f.sent.at(-1).server, P);
  assert.deepEqual(await db.from('jobs').where('id', 1).first(), { id: 1 });
  assert.equal(f.sent.at(-1).server, R);
  assert.equal(f.sent.at(-1).headers['fenec-after'], '7');
  await db.run('get jobs');
  assert.equal(f.sent.at(-1).server, P);
  await db.run('get jobs', [], { read: true });
  assert.equal(f.sent.at(-1).server, R);
});

test('a replica read that times out (504) or cannot be reached goes to the primary', async () => {
  const answers = {
    [P]: (req) => (req.text.startsWith('get ') ? json([{ id: 1, at: 'primary' }]) : ok()),
    [R]: () => json({ error: 'change 7 has not reached this server', seq: 3 }, 504),
  };
  const f = byServer(answers);
  const db = connect([P, R], { fetch: f.fetch, readFrom: 'replica' });
  await db.run('put jobs {payload: 1}');
  assert.deepEqual(await db.from('jobs').rows(), [{ id: 1, at: 'primary' }]);
  assert.deepEqual(f.servers(), [P, R, P]);
  answers[R] = refused;
  await db.from('jobs').rows();
  assert.deepEqual(f.servers().slice(3), [R, P]);
  assert.equal(db.url, P);
});

test('connect takes a URL or a non-empty list of them, and readFrom primary or replica', () => {
  assert.throws(() => connect([]), FenecError);
  assert.throws(() => connect([P, 'ftp://x']), FenecError);
  assert.throws(() => connect(P, { readFrom: 'nearest' }), FenecError);
  assert.deepEqual(connect([P + '/', R, P]).servers, [P, R]);
});

test('a real refused connect is tried on the next server, then fails as before', async () => {
  const { createServer } = await import('node:net');
  const ports = [];
  for (let i = 0; i < 2; i++) {
    const srv = createServer();
    await new Promise((r) => srv.listen(0, '127.0.0.1', r));
    ports.push(srv.address().port);
    await new Promise((r) => srv.close(r)); // nothing listens there now: a connect is refused
  }
  const urls = ports.map((p) => `http://127.0.0.1:${p}`);
  const db = connect(urls, { timeout: 5000 });
  await assert.rejects(db.run('get jobs'), TypeError);
  assert.equal(db.url, urls[0]); // round once: back where it started
});

test("a worker tells a change of its client's primary as a `primary` event, once per change", async () => {
  const events = [];
  const f = byServer({ [R]: replicaOf(P), [P]: () => json([]) });
  const w = connect(R, { fetch: f.fetch }).worker('jobs', { name: 'w', onEvent: (e) => events.push(e) });
  assert.deepEqual(await w.claim({ wait: 0 }), []);
  assert.deepEqual(f.servers(), [R, P]);
  await w.claim({ wait: 0 });
  assert.deepEqual(events.filter((e) => e.type === 'primary'), [{ type: 'primary', url: P, worker: 'w' }]);
});
