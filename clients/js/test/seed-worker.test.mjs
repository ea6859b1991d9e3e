// The seed page's worker loop, as the README writes it with the worker helper (its `worker` block,
// compiled from TypeScript), in three processes at once against a live fenec-server on a file,
// which is stopped and started again in the middle: every job is acked once, no process exits.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, expr } from '@fenecdb/web/client';
import { HARNESS, compile, readmeBlocks } from './blocks.mjs';
import { skip } from './live.mjs';
import { freePort, startServer } from './server.mjs';

const JOBS = 150;
const WORKERS = 3;

test('the seed worker loop, in three processes, acks every job exactly once across a server restart', { skip, timeout: 120000 }, async () => {
  const blocks = readmeBlocks('worker');
  assert.equal(blocks.length, 1, 'the README holds the seed worker');
  assert.match(blocks[0], /^import \{ connect \} from '@fenecdb\/web\/client';$/m);
  assert.match(blocks[0], /\.run\(/, 'the block runs the worker helper');
  const file = compile(blocks[0], 'seed-worker');

  const dir = mkdtempSync(join(tmpdir(), 'fenec-js-seed-'));
  const data = join(dir, 'jobs.fenec');
  const port = await freePort();
  let server = await startServer(['--file', data], { port });
  const db = connect(server.url);
  await db.run('create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)');
  const put = (from, n) => db.from('jobs').insert(
    Array.from({ length: n }, (_, k) => ({ payload: { to: `user${from + k}@example.com` }, run_at: expr('now()'), attempts: 0 })),
  );
  await put(0, 50); // some wait before the workers start, the rest come while they are held

  const acks = [];
  const children = [];
  const exited = [];
  for (let w = 0; w < WORKERS; w++) {
    const child = spawn(process.execPath, ['--import', HARNESS, file], {
      env: { ...process.env, FENEC_TEST_URL: server.url, FENEC_REPORT_ACKS: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (d) => (err += d));
    let buf = '';
    child.stdout.on('data', (d) => {
      buf += d;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        const m = /^ACK (\S+) (.*)$/.exec(line);
        if (m) acks.push({ id: JSON.parse(m[1]), auth: JSON.parse(m[2]), worker: w });
      }
    });
    exited.push(new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, err }))));
    children.push(child);
  }
  /** Waits for `cond`, failing at once if a worker process exits. */
  const until = async (cond, what) => {
    const deadline = Date.now() + 60000;
    while (!(await cond())) {
      if (Date.now() > deadline) assert.fail(`waited 60 s for ${what}`);
      const early = await Promise.race([...exited, new Promise((r) => setTimeout(() => r(null), 50))]);
      if (early) assert.fail(`a worker exited: ${JSON.stringify(early)}`);
    }
  };
  try {
    await put(50, 25);
    await until(() => acks.length >= 40, '40 acks');
    // The restart: every held claim and every call in flight meets a closed port for a while.
    await server.stop();
    await until(async () => !(await db.from('jobs').count().then(() => true, () => false)), 'the server refusing');
    server = await startServer(['--file', data], { port });
    for (let from = 75; from < JOBS; from += 25) await put(from, 25);
    await until(async () => acks.length >= JOBS && (await db.from('jobs').count()) === 0, 'every job acked');
  } finally {
    for (const c of children) c.kill('SIGTERM');
    await Promise.all(exited);
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  const ids = acks.map((a) => a.id).sort((a, b) => a - b);
  assert.deepEqual(ids, Array.from({ length: JOBS }, (_, k) => k + 1), 'every job acked exactly once');
  assert.ok(acks.every((a) => a.auth === 'Bearer a worker token'), 'each request carries the page\'s token');
  const busy = new Set(acks.map((a) => a.worker));
  console.log(`# ${JOBS} jobs acked by ${busy.size} of ${WORKERS} workers, across a restart`);
});
