// The public surface of `@fenecdb/web/client` is exactly the agreed one (clients.md §3.1, plus the
// worker helper): a test fails when a name slips in or out.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as client from '@fenecdb/web/client';

test('the client entry exports exactly the agreed names', () => {
  assert.deepEqual(Object.keys(client).sort(), [
    'Cond', 'Expr', 'FenecError', 'FenecHttp', 'Inc', 'Job', 'Query', 'Worker',
    'and', 'connect', 'expr', 'from', 'inc', 'not', 'or', 'raw',
  ]);
});

test('the package exports only ./client, with its types, and has no runtime dependency', () => {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  assert.equal(pkg.name, '@fenecdb/web');
  assert.equal(pkg.type, 'module');
  assert.deepEqual(Object.keys(pkg.exports), ['./client', './package.json']);
  assert.equal(pkg.exports['./client'].types, './dist/client.d.ts');
  assert.equal(pkg.dependencies, undefined);
  const dts = readFileSync(new URL('../dist/client.d.ts', import.meta.url), 'utf8');
  for (const name of ['connect', 'from', 'raw', 'expr', 'inc', 'or', 'and', 'not', 'FenecError']) {
    assert.match(dts, new RegExp(`\\b${name}\\b`), `${name} is typed`);
  }
});

test('FenecError is an Error, and a builder refusal has no status', () => {
  try {
    client.from('jobs').limit(-3);
    assert.fail('limit(-3) was not refused');
  } catch (e) {
    assert.ok(e instanceof client.FenecError);
    assert.ok(e instanceof Error);
    assert.equal(e.name, 'FenecError');
    assert.equal(e.status, undefined);
    assert.equal(e.code, 'builder');
    assert.equal(e.message, 'limit must be a non-negative integer: -3');
  }
});
