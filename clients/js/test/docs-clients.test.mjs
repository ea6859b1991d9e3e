// docs/clients.md's `js` block ("Replicas and failover") runs as plain JavaScript against a live primary
// and its replica (the page's URLs replaced by theirs); each `console.log(x) // → v` prints v.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { TMP, expectations } from './blocks.mjs';
import { skip } from './live.mjs';
import { startServer } from './server.mjs';

const run = promisify(execFile);
const PAGE = new URL('../../../docs/clients.md', import.meta.url);
const PRIMARY = 'http://127.0.0.1:8080';
const REPLICA = 'http://127.0.0.1:8081';

function jsBlocks() {
  return [...readFileSync(PAGE, 'utf8').matchAll(/```js\n([\s\S]*?)\n```\n/g)].map((m) => m[1]);
}

test('docs/clients.md has one js block', () => {
  assert.equal(jsBlocks().length, 1);
});

test("docs/clients.md's replicas example runs against a primary and its replica", { skip, timeout: 120000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'fenec-docs-clients-'));
  const token = 'docs-clients-token';
  const primary = await startServer(['--file', join(dir, 'p.fenec'), '--sync', 'always', '--replication-token', token]);
  let replica;
  try {
    replica = await startServer(['--file', join(dir, 'r.fenec'), '--replica-of', primary.url, '--replication-token', token]);
    const swap = (text) => text.replaceAll(REPLICA, replica.url).replaceAll(PRIMARY, primary.url);
    const [block] = jsBlocks();
    mkdirSync(TMP, { recursive: true });
    const file = `${TMP}docs-clients.mjs`;
    writeFileSync(file, swap(block));
    const { stdout } = await run(process.execPath, [file], { timeout: 60000 });
    const want = expectations(block).map(swap);
    assert.deepEqual(want, [primary.url, '1']);
    assert.deepEqual(stdout.trimEnd().split('\n'), want);
  } finally {
    await replica?.stop();
    await primary.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});
