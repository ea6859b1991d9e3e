// Every `run` block of the README, compiled from TypeScript, runs against a live fenec-server;
// each `console.log(x)  // → v` must print v.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { HARNESS, compile, expectations, readmeBlocks } from './blocks.mjs';
import { liveServer, skip } from './live.mjs';

const run = promisify(execFile);
const server = liveServer();
const blocks = readmeBlocks('run');

test('the README has its runnable blocks', () => {
  assert.ok(blocks.length >= 6, `${blocks.length} blocks`);
});

for (const [k, source] of blocks.entries()) {
  const title = source.split('\n').find((l) => l.startsWith('const ') || l.startsWith('console.log')) ?? `block ${k + 1}`;
  test(`README block ${k + 1}: ${title.slice(0, 60)}`, { skip, timeout: 30000 }, async () => {
    const file = compile(source, `readme-${k + 1}`);
    const { stdout } = await run(process.execPath, ['--import', HARNESS, file], {
      env: { ...process.env, FENEC_TEST_URL: server.url, FENEC_JSON_LOG: '1' },
      timeout: 25000,
    });
    const want = expectations(source);
    assert.ok(want.length > 0, 'the block checks something');
    assert.deepEqual(stdout.trimEnd().split('\n'), want);
  });
}
