// docs/queues.md's `js` block, "A worker in JavaScript", runs as plain JavaScript (no TypeScript
// step: a `.mjs` file as written) against a live fenec-server: it claims the jobs enqueued before
// it and acks each; the harness reports every ack answered 1, and the loop is stopped once all are.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect, expr } from '@fenecdb/web/client';
import { HARNESS, TMP } from './blocks.mjs';
import { liveServer, skip } from './live.mjs';

const server = liveServer();
const PAGE = new URL('../../../docs/queues.md', import.meta.url);

function jsBlocks() {
  return [...readFileSync(PAGE, 'utf8').matchAll(/```js\n([\s\S]*?)\n```\n/g)].map((m) => m[1]);
}

test('docs/queues.md has one js block', () => {
  assert.equal(jsBlocks().length, 1);
});

test('docs/queues.md\'s worker runs as plain JavaScript and acks every job', { skip, timeout: 60000 }, async () => {
  const db = connect(server.url);
  await db.run('create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int, error text)');
  await db.from('jobs').insert(['ada', 'bo', 'cy'].map((to) => ({ payload: { to }, run_at: expr('now()'), attempts: 0 })));
  mkdirSync(TMP, { recursive: true });
  const file = `${TMP}docs-queues-worker.mjs`;
  writeFileSync(file, jsBlocks()[0]);
  const child = spawn(process.execPath, ['--import', HARNESS, file], {
    env: { ...process.env, FENEC_TEST_URL: server.url, FENEC_REPORT_ACKS: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (c) => (out += c));
  child.stderr.on('data', (c) => (err += c));
  const exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
  const acked = () => out.split('\n').filter((l) => l.startsWith('ACK ')).length;
  const end = Date.now() + 30000;
  let code;
  while (acked() < 3 && code === undefined && Date.now() < end) {
    code = await Promise.race([exited, new Promise((r) => setTimeout(r, 20))]);
  }
  child.kill('SIGKILL');
  await exited;
  assert.equal(code, undefined, `the loop exited early (${code}):\n${err}`);
  assert.equal(acked(), 3, `acks:\n${out}\n${err}`);
  assert.equal(await db.from('jobs').count(), 0);
});
