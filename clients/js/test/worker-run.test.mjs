// Worker.run against a live fenec-server (and, for what a server cannot be made to do, a fake
// fetch or a socket that never answers): heartbeat, lease loss, a restart, stop and hard stop,
// throwing handlers, dead letters, the concurrency bound, timeouts. Every wait is for a condition,
// under a generous deadline; nothing assumes how fast the machine is.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, expr, raw, FenecError } from '@fenecdb/web/client';
import { liveServer, skip } from './live.mjs';
import { freePort, startServer } from './server.mjs';

const server = liveServer();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Waits until `cond()` holds, failing after `ms` (a bound far above what any machine needs). */
async function until(cond, what, ms = 30000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) assert.fail(`waited ${ms} ms for ${what}`);
    await sleep(10);
  }
}

let queues = 0;
async function queue(db, jobs = []) {
  const q = `wq${++queues}`;
  await db.run(`create collection ${q} (payload json, run_at timestamp @sorted, owner text, attempts int, error text)`);
  if (jobs.length > 0) {
    await db.from(q).insert(jobs.map((j) => ({ payload: j.payload ?? j, run_at: expr('now()'), attempts: j.attempts ?? 0 })));
  }
  return q;
}

/** A fetch that counts the answered requests whose statement matches `re`. */
function counting(re) {
  const c = { n: 0, sent: 0 };
  c.fetch = async (url, init) => {
    const hit = re.test(JSON.parse(init.body).query ?? '');
    if (hit) c.sent++;
    const res = await fetch(url, init);
    if (hit && res.ok) c.n++;
    return res;
  };
  return c;
}

const of = (events, type) => events.filter((e) => e.type === type);

test('the heartbeat keeps a slow job: another worker never takes it, it runs once', { skip, timeout: 60000 }, async () => {
  const extends_ = counting(/^set \w+ \{run_at: now\(\) \+ \$1\}/);
  const db = connect(server.url, { fetch: extends_.fetch });
  const q = await queue(db, [{ n: 1 }]);
  const events = [];
  // 35 beats of 100 ms span at least 3.5 s: past the 3 s lease, so only the heartbeat kept it.
  const w1 = db.worker(q, { name: 'slow', leaseMs: 3000, heartbeatMs: 100, waitMs: 500, onEvent: (e) => events.push(e) });
  const other = db.worker(q, { name: 'other', leaseMs: 3000, waitMs: 200 });
  const run = w1.run(async () => {
    await until(() => extends_.n >= 35, '35 extends');
  });
  await until(() => of(events, 'start').length === 1, 'the slow job started');
  const stolen = [];
  const otherRun = other.run((job) => stolen.push(job.id));
  await until(() => of(events, 'done').length === 1, 'the slow job acked');
  await Promise.all([w1.stop(), other.stop()]);
  await Promise.all([run, otherRun]);
  assert.deepEqual(stolen, [], 'the other worker took nothing');
  assert.equal(of(events, 'start').length, 1, 'started once');
  assert.equal(of(events, 'lost').length, 0);
  assert.equal(await db.from(q).count(), 0);
});

test('a lost lease aborts the handler\'s signal; the worker writes nothing more for that job', { skip, timeout: 60000 }, async () => {
  const db = connect(server.url);
  const q = await queue(db, [{ n: 1 }]);
  const events = [];
  const w = db.worker(q, { name: 'w', leaseMs: 3000, heartbeatMs: 50, waitMs: 200, onEvent: (e) => events.push(e) });
  let reason;
  const run = w.run(async (job, signal) => {
    assert.equal(signal, job.signal);
    await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
    reason = signal.reason;
  });
  await until(() => of(events, 'start').length === 1, 'the job started');
  // Another claim takes the job (as when the lease lapsed under a stalled worker).
  assert.equal(await db.from(q).where('id', 1).update({ owner: 'thief:1' }), 1);
  await until(() => reason !== undefined, 'the signal aborted');
  assert.equal(reason.name, 'AbortError');
  await until(() => of(events, 'lost').length === 1, 'the lost event');
  await w.stop();
  await run;
  assert.deepEqual(of(events, 'done').concat(of(events, 'failed')), []);
  const [row] = await db.from(q).rows();
  assert.equal(row.owner, 'thief:1', 'the job is the thief\'s, untouched by the worker');
});

test('a worker lives through a server restart: every job done exactly once', { skip, timeout: 120000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'fenec-js-restart-'));
  const file = join(dir, 'q.fenec');
  const port = await freePort();
  let srv = await startServer(['--file', file], { port });
  const db = connect(srv.url);
  const JOBS = 30;
  const q = await queue(db, Array.from({ length: JOBS }, (_, k) => ({ n: k + 1 })));
  const events = [];
  const w = db.worker(q, {
    name: 'w', batch: 5, concurrency: 2, leaseMs: 20000, waitMs: 1000, timeoutMs: 2000,
    retryMinMs: 20, retryMaxMs: 200, onEvent: (e) => events.push(e),
  });
  let down;
  const serverDown = new Promise((r) => (down = r));
  const run = w.run(async (job) => {
    // From the eleventh job on, the handlers finish only once the server is down: their acks
    // and the next claims meet a closed port.
    if (of(events, 'start').length > 10) await serverDown;
  });
  try {
    await until(() => of(events, 'done').length >= 10, 'ten jobs done');
    await srv.stop();
    down();
    await until(() => of(events, 'retry').length >= 3, 'retries while the server is down');
    srv = await startServer(['--file', file], { port });
    await until(() => of(events, 'done').length >= JOBS, 'every job done', 90000);
    await w.stop();
    await run;
    const done = of(events, 'done').map((e) => e.id).sort((a, b) => a - b);
    assert.deepEqual(done, Array.from({ length: JOBS }, (_, k) => k + 1), 'each job acked once');
    assert.equal(await db.from(q).count(), 0);
    assert.ok(of(events, 'retry').every((e) => typeof e.error === 'string' && e.delayMs >= 0));
  } finally {
    await w.stop({ hard: true });
    await srv.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('stop() gives a held claim up at once', { skip, timeout: 60000 }, async () => {
  const claims = counting(/ returning \*$/);
  const db = connect(server.url, { fetch: claims.fetch });
  const q = await queue(db);
  const events = [];
  const w = db.worker(q, { waitMs: 30000, onEvent: (e) => events.push(e) });
  const run = w.run(() => assert.fail('no job'));
  await until(() => claims.sent === 1, 'the claim sent');
  await sleep(50); // (only so that the claim is likely held at the server, not yet on its way)
  const t0 = performance.now();
  await w.stop();
  await run;
  // Bounded far below the 30 s the claim would be held: stop did not wait it out.
  assert.ok(performance.now() - t0 < 10000, 'stop returned while the claim was held');
  assert.deepEqual(events.map((e) => e.type), ['stopped']);
  assert.deepEqual([claims.sent, claims.n], [2, 1], 'the held claim given up, sent again with no wait: answered none');
});

test('on stop the unstarted jobs are given back at once; the running one finishes', { skip, timeout: 60000 }, async () => {
  const db = connect(server.url);
  const q = await queue(db, [1, 2, 3, 4, 5].map((n) => ({ n })));
  const events = [];
  const w = db.worker(q, { batch: 5, concurrency: 1, waitMs: 200, drainTimeoutMs: 30000, onEvent: (e) => events.push(e) });
  let finish;
  const gate = new Promise((r) => (finish = r));
  const run = w.run(async () => {
    await gate;
  });
  await until(() => of(events, 'start').length === 1, 'the first job started');
  const stopped = w.stop();
  await until(() => of(events, 'released').length === 4, 'four jobs given back');
  assert.equal(of(events, 'done').length, 0, 'given back while the first still runs');
  const back = await db.from(q).where('owner', null).where('attempts', 0).where(raw('run_at <= now()')).count();
  assert.equal(back, 4, 'ready again, with no owner and their attempt not counted');
  assert.equal(await db.from(q).where('owner', '!=', null).count(), 1);
  finish();
  await stopped;
  await run;
  assert.deepEqual(of(events, 'done').map((e) => e.id), [1]);
  assert.equal(events.at(-1).type, 'stopped');
  assert.equal(await db.from(q).count(), 4);
});

test('a throwing handler fails its job, whatever it throws, and the worker goes on', { skip, timeout: 60000 }, async () => {
  const db = connect(server.url);
  const kinds = ['string', 'object', 'undefined', 'error', 'ok'];
  const q = await queue(db, kinds.map((kind) => ({ kind })));
  const events = [];
  const w = db.worker(q, { batch: 2, backoff: () => 600000, waitMs: 200, onEvent: (e) => events.push(e) });
  const run = w.run((job) => {
    const { kind } = job.payload;
    if (kind === 'string') throw 'a string';
    if (kind === 'object') throw { code: 7 };
    if (kind === 'undefined') throw undefined;
    if (kind === 'error') return Promise.reject(new Error('an Error'));
  });
  await until(() => of(events, 'failed').length === 4 && of(events, 'done').length === 1, 'four failed, one done');
  await db.from(q).insert({ payload: { kind: 'later' }, run_at: expr('now()'), attempts: 0 });
  await until(() => of(events, 'done').length === 2, 'a job enqueued afterwards done too');
  await w.stop();
  await run;
  const rows = await db.from(q).where('run_at', '>', new Date()).order('id').rows();
  assert.deepEqual(rows.map((r) => [r.payload.kind, r.error, r.owner, r.attempts]), [
    ['string', 'a string', null, 1],
    ['object', '{"code":7}', null, 1],
    ['undefined', 'undefined', null, 1],
    ['error', 'an Error', null, 1],
  ]);
});

test('a job claimed past maxAttempts is dead-lettered unrun; one failing at the limit is dead', { skip, timeout: 60000 }, async () => {
  const db = connect(server.url);
  const q = await queue(db, [{ payload: { n: 'past' }, attempts: 5 }, { payload: { n: 'last' }, attempts: 4 }, { payload: { n: 'ok' } }]);
  const events = [];
  const ran = [];
  const w = db.worker(q, { maxAttempts: 5, waitMs: 200, onEvent: (e) => events.push(e) });
  const run = w.run((job) => {
    ran.push(job.payload.n);
    if (job.payload.n === 'last') throw new Error('smtp timeout');
  });
  await until(() => of(events, 'dead').length === 2 && of(events, 'done').length === 1, 'two dead, one done');
  await w.stop();
  await run;
  assert.deepEqual(ran.sort(), ['last', 'ok'], 'the job past its attempts never ran');
  const dead = await db.from(q).where('run_at', null).order('id').rows();
  assert.deepEqual(dead.map((r) => [r.payload.n, r.error, r.attempts, r.owner]), [
    ['past', 'attempts exhausted', 6, null],
    ['last', 'smtp timeout', 5, null],
  ]);
});

test('no more than `concurrency` jobs of a batch run at once, and that many do', { skip, timeout: 60000 }, async () => {
  const db = connect(server.url);
  const q = await queue(db, Array.from({ length: 9 }, (_, k) => ({ n: k })));
  const events = [];
  const w = db.worker(q, { batch: 9, concurrency: 3, waitMs: 200, onEvent: (e) => events.push(e) });
  let active = 0;
  let peak = 0;
  let open = () => {};
  let full = new Promise((r) => (open = r));
  const run = w.run(async () => {
    active++;
    peak = Math.max(peak, active);
    const mine = full;
    if (active === 3) {
      // three in hand: let them all go, and the next three wait for a full house again
      open();
      full = new Promise((r) => (open = r));
    }
    await mine;
    active--;
  });
  await until(() => of(events, 'done').length === 9, 'nine jobs done');
  await w.stop();
  await run;
  assert.equal(peak, 3);
  assert.equal(of(events, 'claimed')[0].count, 9);
});

test('a hard stop aborts the running handlers and gives their jobs back, without waiting for them', { skip, timeout: 60000 }, async () => {
  const db = connect(server.url);
  const q = await queue(db, [{ n: 1 }, { n: 2 }]);
  const events = [];
  const w = db.worker(q, { batch: 2, concurrency: 1, waitMs: 200, onEvent: (e) => events.push(e) });
  let aborted = false;
  const hard = new AbortController();
  const run = w.run(async (job, signal) => {
    signal.addEventListener('abort', () => (aborted = true));
    await new Promise(() => {}); // ignores its signal: never ends
  }, { hardSignal: hard.signal });
  await until(() => of(events, 'start').length === 1, 'the first job started');
  hard.abort();
  await run;
  assert.equal(aborted, true);
  assert.equal(of(events, 'released').length, 2);
  assert.equal(await db.from(q).where('owner', null).where('attempts', 0).count(), 2);
});

test('a frozen server: each request times out, the worker retries, and stop still returns', { timeout: 60000 }, async () => {
  const sockets = new Set();
  const frozen = createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
  });
  await new Promise((r) => frozen.listen(0, '127.0.0.1', r));
  const events = [];
  try {
    const db = connect(`http://127.0.0.1:${frozen.address().port}`);
    const w = db.worker('jobs', { waitMs: 50, timeoutMs: 100, retryMinMs: 10, retryMaxMs: 20, onEvent: (e) => events.push(e) });
    const run = w.run(() => assert.fail('no job'));
    await until(() => of(events, 'retry').length >= 3, 'three timed-out claims');
    await w.stop();
    await run;
    assert.ok(of(events, 'retry').every((e) => e.call === 'claim' && e.error === 'the request took more than 150 ms'),
      JSON.stringify(of(events, 'retry')));
    assert.ok(sockets.size >= 3, 'each try a request of its own');
  } finally {
    for (const s of sockets) s.destroy();
    await new Promise((r) => frozen.close(r));
  }
});

test('a claim whose answer was lost is sent again under the same owner and key', async () => {
  const sent = [];
  const fetch = async (url, init) => {
    const { query, params } = JSON.parse(init.body);
    sent.push({ query, params, key: init.headers['idempotency-key'] });
    if (query.endsWith('returning *')) {
      if (sent.length === 1) throw new TypeError('fetch failed');
      if (sent.length === 2) return Response.json([{ id: 7, payload: {}, attempts: 1 }]);
      return new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason)));
    }
    return Response.json({ affected: 1 });
  };
  const events = [];
  const db = connect('http://db.invalid', { fetch });
  const w = db.worker('jobs', { name: 'w', retryMinMs: 1, retryMaxMs: 1, onEvent: (e) => events.push(e) });
  const ran = [];
  const run = w.run((job) => ran.push(job.id));
  await until(() => of(events, 'done').length === 1, 'the job done');
  await until(() => sent.length === 4, 'the next claim sent');
  await w.stop();
  await run;
  assert.deepEqual(ran, [7]);
  assert.equal(sent[0].key, sent[1].key);
  assert.deepEqual(sent[0].params, sent[1].params);
  assert.equal(sent[1].params[0], 'w:1');
  assert.match(sent[2].key, /^ack:w:1:7@/);
  assert.equal(sent[3].params[0], 'w:2', 'the next claim is a new one');
  assert.deepEqual(of(events, 'retry').map((e) => [e.call, e.worker, e.error]), [['claim', 'w', 'fetch failed']]);
});

test('a client with no timeout given still bounds every request', async () => {
  let signal;
  const db = connect('http://db.invalid', { fetch: async (url, init) => ((signal = init.signal), Response.json([])) });
  await db.from('jobs').rows();
  assert.ok(signal instanceof AbortSignal, 'each request goes with a signal');
  const none = connect('http://db.invalid', { timeout: Infinity, fetch: async (url, init) => ((signal = init.signal), Response.json([])) });
  await none.from('jobs').rows();
  assert.equal(signal, undefined, 'timeout: Infinity sends none');
});

test('an iteration stopped mid-batch gives back the jobs it had not handed out', { skip, timeout: 60000 }, async () => {
  const db = connect(server.url);
  const q = await queue(db, [{ n: 1 }, { n: 2 }, { n: 3 }]);
  const events = [];
  const w = db.worker(q, { batch: 3, waitMs: 200, onEvent: (e) => events.push(e) });
  const seen = [];
  for await (const job of w) {
    seen.push(job.payload.n);
    assert.equal(await job.ack(), true);
    void w.stop();
  }
  assert.deepEqual(seen, [1]);
  assert.deepEqual(of(events, 'released').map((e) => e.id).sort(), [2, 3]);
  assert.equal(await db.from(q).where('owner', null).where('attempts', 0).where(raw('run_at <= now()')).count(), 2);
});

test('a worker adds no abort listener per batch: 60 batches, no MaxListenersExceededWarning', { timeout: 60000 }, async () => {
  const warnings = [];
  const onWarning = (w) => warnings.push(w);
  process.on('warning', onWarning);
  try {
    let claims = 0;
    const fetch = async (url, init) => {
      const { query } = JSON.parse(init.body);
      if (query.endsWith('returning *')) {
        if (++claims <= 60) return Response.json([{ id: claims, payload: {}, attempts: 1 }]);
        return new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason), { once: true }));
      }
      return Response.json({ affected: 1 });
    };
    const events = [];
    const w = connect('http://db.invalid', { fetch }).worker('jobs', { onEvent: (e) => events.push(e) });
    const run = w.run(() => {});
    await until(() => of(events, 'done').length === 60, '60 batches done');
    await w.stop();
    await run;
    await new Promise((r) => setImmediate(r)); // a warning is emitted on a later tick
    assert.deepEqual(warnings.filter((w) => w.name === 'MaxListenersExceededWarning').map(String), []);
  } finally {
    process.off('warning', onWarning);
  }
});

test('a queue name with a typo ends run with the 404 at once: no retry, `stopped` last', { skip, timeout: 60000 }, async () => {
  const db = connect(server.url);
  await queue(db);
  const events = [];
  const w = db.worker('mial', { waitMs: 200, onEvent: (e) => events.push(e) });
  const ended = w.run(() => assert.fail('no job')).then(() => 'resolved', (e) => e);
  const got = await Promise.race([ended, sleep(20000).then(() => 'still running after 20 s')]);
  if (got === 'still running after 20 s') await w.stop();
  assert.ok(got instanceof FenecError, `run ended with ${String(got)}; events ${JSON.stringify(events.slice(0, 3))}`);
  assert.equal(got.status, 404);
  assert.deepEqual(of(events, 'retry'), []);
  assert.equal(events.at(-1).type, 'stopped');
});

test('enqueue puts a job the worker claims: ready at once, or after its delay', { skip, timeout: 60000 }, async () => {
  const db = connect(server.url);
  const q = await queue(db);
  const w = db.worker(q, { waitMs: 200 });
  await w.enqueue({ n: 1 });
  await w.enqueue({ n: 2 }, { delayMs: 3600000 });
  const rows = await db.from(q).select('payload', 'attempts', 'owner').order('id').rows();
  assert.deepEqual(rows, [{ payload: { n: 1 }, attempts: 0, owner: null }, { payload: { n: 2 }, attempts: 0, owner: null }]);
  const seen = [];
  const run = w.run((job) => {
    seen.push(job.payload.n);
    void w.stop();
  });
  await run;
  assert.deepEqual(seen, [1], 'the delayed job is not ready yet');
  assert.equal(await db.from(q).count(), 1);
});

/**
 * A server that took two jobs for the first claim and then froze: every later request hangs until
 * its signal gives it up. The handler of the first job never ends and ignores its signal.
 */
function frozenAfterClaim() {
  let claimed = false;
  const sent = [];
  const fetch = (url, init) => {
    const { query } = JSON.parse(init.body);
    sent.push(query);
    if (!claimed && query.endsWith('returning *')) {
      claimed = true;
      return Promise.resolve(Response.json([{ id: 1, payload: {}, attempts: 1 }, { id: 2, payload: {}, attempts: 1 }]));
    }
    return new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason), { once: true }));
  };
  return { fetch, sent };
}

// Both bounds are the contract's (lifecycle.stop_bound, hard_stop): drain timeout + 1 s, and 1 s. The
// requests' own timeout (20 s) is far past them, so a stop that waited for it fails; the margin
// above the bound (3 s) is for a busy machine's late timers.
for (const [how, drainTimeoutMs, bound] of [['a graceful stop', 500, 1500], ['a hard stop', 60000, 1000]]) {
  test(`${how} returns within its bound while the server does not answer`, { timeout: 60000 }, async () => {
    const server = frozenAfterClaim();
    const events = [];
    const w = connect('http://db.invalid', { fetch: server.fetch })
      .worker('jobs', { name: 'w', batch: 2, drainTimeoutMs, timeoutMs: 20000, onEvent: (e) => events.push(e) });
    let started;
    const running = new Promise((r) => (started = r));
    let signal;
    const run = w.run((job, s) => {
      signal = s;
      started();
      return new Promise(() => {}); // never ends, ignores its signal
    });
    await running;
    const t0 = performance.now();
    void w.stop({ hard: how === 'a hard stop' });
    await run;
    const took = performance.now() - t0;
    assert.ok(took < bound + 3000, `run returned ${Math.round(took)} ms after the stop (bound ${bound} ms)`);
    assert.equal(signal.aborted, true, 'the running handler was cancelled');
    assert.ok(server.sent.filter((q) => q.startsWith('set jobs {owner: $1, run_at: now()')).length >= 2, 'both jobs were given back, one try at least');
    assert.equal(events.at(-1).type, 'stopped');
  });
}

test('a stop before run makes run return at once, having claimed nothing', async () => {
  const w = connect('http://db.invalid', { fetch: () => assert.fail('nothing is sent') }).worker('jobs');
  await w.stop();
  await w.run(() => assert.fail('no job'));
});
