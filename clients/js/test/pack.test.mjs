// The package as `npm pack` makes it from a clean checkout: `prepare` (scripts/prepare.mjs) builds dist/, the tarball ships it, and a
// CommonJS `require` finds the entry point (the `default` condition; Node 20.19 and later load ESM from require),
// where without it the path was reported missing (ERR_PACKAGE_PATH_NOT_EXPORTED).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, symlinkSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(dirname(fileURLToPath(import.meta.url)));

test('npm pack ships the built client, its types and the README', { timeout: 120000 }, () => {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: HERE, encoding: 'utf8' });
  const files = JSON.parse(out)[0].files.map((f) => f.path);
  for (const needed of ['dist/client.js', 'dist/client.d.ts', 'dist/worker.js', 'README.md', 'package.json']) {
    assert.ok(files.includes(needed), `${needed} is not in the package: ${files.join(', ')}`);
  }
  assert.ok(!files.some((f) => f.startsWith('src/') || f.startsWith('test/')), 'sources and tests stay out');
  const pkg = JSON.parse(readFileSync(join(HERE, 'package.json'), 'utf8'));
  assert.equal(pkg.scripts.prepare, 'node scripts/prepare.mjs', 'a clean checkout builds dist/ on install and pack');
  assert.equal(pkg.license, 'Apache-2.0');
});

test('a CommonJS require finds the client', () => {
  const dir = mkdtempSync(join(tmpdir(), 'fenec-cjs-'));
  mkdirSync(join(dir, 'node_modules', '@fenecdb'), { recursive: true });
  symlinkSync(HERE, join(dir, 'node_modules', '@fenecdb', 'web'));
  const code = "const c = require('@fenecdb/web/client'); process.stdout.write(typeof c.connect)";
  const run = spawnSync(process.execPath, ['--no-warnings', '-e', code], { cwd: dir, encoding: 'utf8' });
  assert.doesNotMatch(run.stderr, /ERR_PACKAGE_PATH_NOT_EXPORTED/);
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stdout, 'function');
});
