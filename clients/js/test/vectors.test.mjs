// The vectors runner on files of our own: the sample passes whole, and every case of the broken
// file fails with the reason it should (a runner that cannot fail proves nothing).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { runVectors } from './conformance/vectors.mjs';
import { existsSync } from 'node:fs';
import path from 'node:path';

const data = (name) => fileURLToPath(new URL(`./testdata/${name}`, import.meta.url));

test('every case of the sample vectors passes', async () => {
  const lines = [];
  const r = await runVectors(data('vectors-sample.json'), { log: (l) => lines.push(l) });
  assert.deepEqual(lines.filter((l) => l.startsWith('FAIL')), []);
  assert.equal(r.failed, 0);
  assert.equal(r.passed, 16);
  assert.match(lines.at(-1), /^vectors .*vectors-sample\.json: 16 ok, 0 FAIL, 0 checked-elsewhere$/);
});

test('every case of the broken vectors fails, each for its reason', async () => {
  const lines = [];
  const r = await runVectors(data('vectors-broken.json'), { log: (l) => lines.push(l) });
  assert.equal(r.passed, 0);
  assert.equal(r.failed, 9);
  const why = Object.fromEntries(lines.filter((l) => l.startsWith('FAIL ')).map((l) => l.slice(5).split(/: (.*)/s).slice(0, 2)));
  assert.equal(why['expects the wrong text'], '"get u" / "get t"');
  assert.match(why['expects an integer where a float goes'], /the integer 1 \/ the float 1\.5/);
  assert.match(why['expects a float as an integer'], /3 \/ 2/);
  assert.match(why['expects a refusal that does not come'], /^the refusal "nope"/);
  assert.equal(why['unknown op'], 'unsupported op explode');
  assert.equal(why['terminal in the middle'], 'malformed case');
  assert.equal(why['unknown encoding'], 'unknown encoding $big');
  assert.match(why['a wrong header'], /^header Fenec-Wait: "20" \/ "10"$/);
  assert.match(why['an integer too far'], /7\.5 \/ 7/);
});

test('FENEC_ONLY narrows the run to matching names', async () => {
  const lines = [];
  const r = await runVectors(data('vectors-sample.json'), { only: 'claim', log: (l) => lines.push(l) });
  assert.equal(r.passed, 1);
  assert.equal(r.failed, 0);
});

test('a file that is missing, not JSON or empty fails', async () => {
  for (const name of ['no-such-file.json', 'spec-examples.json.missing']) {
    const r = await runVectors(data(name), { log: () => {} });
    assert.deepEqual(r, { passed: 0, failed: 1 });
  }
  const r = await runVectors(data('empty.json'), { log: () => {} });
  assert.deepEqual(r, { passed: 0, failed: 1 });
});

test('a file with fewer cases than the minimum fails', async () => {
  const r = await runVectors(data('vectors-sample.json'), { minCases: 100, log: () => {} });
  assert.equal(r.failed, 1);
});

// The project's own vectors (conformance/builder.json) run in the SDK's normal test command too
// (conformance.md A.7), from the file named by FENEC_VECTORS when it is set.
const project = fileURLToPath(new URL('../../../conformance/builder.json', import.meta.url));
const file = process.env.FENEC_VECTORS ? path.resolve(process.cwd(), process.env.FENEC_VECTORS) : project;
const present = existsSync(file);
if (!present) console.log(`# skip: no vectors file at ${file} yet`);
test(`every case of ${path.basename(file)} passes`, { skip: present ? false : `no vectors file at ${file}` }, async () => {
  const lines = [];
  const r = await runVectors(file, {
    only: process.env.FENEC_ONLY || undefined,
    minCases: process.env.FENEC_VECTORS ? 1 : 200,
    log: (l) => lines.push(l),
  });
  assert.deepEqual(lines.filter((l) => l.startsWith('FAIL')), []);
  assert.equal(r.failed, 0);
  assert.ok(r.passed > 0);
});
