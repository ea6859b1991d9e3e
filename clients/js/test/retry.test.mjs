// What the worker tries again and how long it pauses (src/retry.ts), and the writes it sends again
// over a fake fetch: the same Idempotency-Key on every try, a 412 or another refusal not tried again.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, FenecError } from '@fenecdb/web/client';
import { Backoff, describe, transient } from '../dist/retry.js';

test('the network, timeouts and any 5xx are tried again; other answers (408 and 429 too) and aborts are not', () => {
  const timeout = new DOMException('the request took more than 5 ms', 'TimeoutError');
  for (const e of [new TypeError('fetch failed'), timeout, new FenecError('x', { status: 503 }), new FenecError('x', { status: 500 }),
    new FenecError('x', { status: 599 }), new FenecError('cut short', { status: 200 })]) {
    assert.equal(transient(e), true, describe(e));
  }
  for (const e of [new FenecError('x', { status: 400 }), new FenecError('x', { status: 404 }), new FenecError('x', { status: 408 }), new FenecError('x', { status: 429 }), new FenecError('x', { status: 412 }),
    new FenecError('builder'), new DOMException('stopped', 'AbortError'), 'a string', undefined]) {
    assert.equal(transient(e), false, describe(e));
  }
});

test('a pause is a random time under a cap that doubles from the first to the last', () => {
  const b = new Backoff(100, 5000);
  const caps = [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000];
  for (const cap of caps) {
    const d = b.next();
    assert.ok(Number.isInteger(d) && d >= 0 && d <= cap, `${d} within [0, ${cap}]`);
  }
  b.reset();
  assert.ok(b.next() <= 100);
  // full jitter: over many pauses under one cap, not all the same
  const seen = new Set(Array.from({ length: 50 }, () => new Backoff(1000, 1000).next()));
  assert.ok(seen.size > 1);
});

test('a failure is told by its message, the system code of a network failure, or the thrown value as JSON', () => {
  assert.equal(describe(new TypeError('fetch failed', { cause: { code: 'ECONNREFUSED' } })), 'fetch failed (ECONNREFUSED)');
  assert.equal(describe(new Error('smtp timeout')), 'smtp timeout');
  assert.equal(describe('boom'), 'boom');
  assert.equal(describe({ code: 7 }), '{"code":7}');
  assert.equal(describe(10n), '10');
  assert.equal(describe(undefined), 'undefined');
});

/** A fake server: each claim answers one job once, then holds until aborted; writes answer `writes()`. */
function fakeServer(writes) {
  const sent = [];
  let claimed = false;
  const fetch = async (url, init) => {
    const { query, params } = JSON.parse(init.body);
    sent.push({ query, params, key: init.headers['idempotency-key'] });
    if (query.endsWith('returning *')) {
      if (!claimed) {
        claimed = true;
        return Response.json([{ id: 3, payload: {}, attempts: 1 }]);
      }
      return new Promise((_, reject) => init.signal.addEventListener('abort', () => reject(init.signal.reason)));
    }
    const [status, body] = writes(query);
    return Response.json(body, { status });
  };
  return { fetch, sent };
}

async function runOnce(server, handler = () => {}) {
  const events = [];
  const db = connect('http://db.invalid', { fetch: server.fetch });
  const w = db.worker('jobs', { name: 'w', retryMinMs: 1, retryMaxMs: 2, onEvent: (e) => events.push(e) });
  const run = w.run(handler);
  const deadline = Date.now() + 30000;
  while (!events.some((e) => ['done', 'failed', 'lost'].includes(e.type))) {
    if (Date.now() > deadline) assert.fail(`no settling event: ${JSON.stringify(events)}`);
    await new Promise((r) => setTimeout(r, 5));
  }
  await w.stop();
  await run;
  return events;
}

test('an ack answered 503 is sent again under the same key until it goes through', async () => {
  let n = 0;
  const server = fakeServer(() => (++n <= 2 ? [503, { error: 'the server is starting' }] : [200, { affected: 1 }]));
  const events = await runOnce(server);
  const acks = server.sent.filter((s) => s.query.startsWith('del '));
  assert.equal(acks.length, 3);
  assert.equal(new Set(acks.map((a) => a.key)).size, 1, 'one key for every try');
  assert.match(acks[0].key, /^ack:w:1:3@[0-9a-f]{8}$/);
  assert.deepEqual(events.filter((e) => e.type === 'retry').map((e) => [e.call, e.id, e.error]),
    [['ack', 3, 'the server is starting'], ['ack', 3, 'the server is starting']]);
  assert.equal(events.filter((e) => e.type === 'done').length, 1);
});

test('a fail refused with 412 is the lease lost and the worker goes on; a 400 ends run with it', async () => {
  const lostServer = fakeServer(() => [412, { error: 'wrote 0 rows, and requires 1' }]);
  const events = await runOnce(lostServer, () => {
    throw new Error('nope');
  });
  assert.equal(lostServer.sent.filter((s) => s.query.startsWith('set jobs {owner: $1, error: $2')).length, 1, 'sent once');
  assert.deepEqual(events.filter((e) => e.type === 'lost').map((e) => [e.call, e.id, e.worker]), [['fail', 3, 'w']]);
  assert.equal(events.at(-1).type, 'stopped');

  const refused = fakeServer(() => [400, { error: 'bad request' }]);
  const seen = [];
  const w = connect('http://db.invalid', { fetch: refused.fetch })
    .worker('jobs', { name: 'w', retryMinMs: 1, retryMaxMs: 2, onEvent: (e) => seen.push(e) });
  await assert.rejects(w.run(() => { throw new Error('nope'); }), (e) => e instanceof FenecError && e.status === 400);
  assert.equal(refused.sent.filter((s) => s.query.startsWith('set jobs {owner: $1, error: $2')).length, 1, 'not sent again');
  assert.deepEqual(seen.map((e) => e.type), ['claimed', 'start', 'stopped'], 'no retry, no lost: run ends with it');
});
