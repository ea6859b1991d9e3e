// The README's install, run as written on a fresh clone: the package's tracked files copied to a
// temporary `fenecdb/clients/js` (no node_modules, no dist), the README's `npm install` line run in
// a new project of its own, and the client imported from there. npm does not install a folder
// package's devDependencies, so this is what fails when `prepare` counts on them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(dirname(fileURLToPath(import.meta.url)));

/** The README's install command: the `npm install` line of the block under `## Install`. */
function readmeInstall() {
  const readme = readFileSync(join(HERE, 'README.md'), 'utf8');
  const section = readme.split(/^## /m).find((s) => s.startsWith('Install'));
  assert.ok(section, 'the README has an Install section');
  const block = /```sh\n([\s\S]*?)\n```/.exec(section);
  assert.ok(block, 'the Install section has a sh block');
  const line = block[1].split('\n').find((l) => l.startsWith('npm install '));
  assert.ok(line, 'the block has an npm install line');
  return line.replace(/\s+#.*$/, '');
}

/** The package's files as a fresh clone has them: every file git does not ignore, nothing built. */
function freshClone(into) {
  const listed = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard', '.'], { cwd: HERE, encoding: 'utf8' });
  const files = listed.split('\0').filter((f) => f !== '' && existsSync(join(HERE, f)));
  assert.ok(files.includes('package.json'));
  assert.ok(!files.some((f) => f.startsWith('dist/') || f.startsWith('node_modules/')));
  for (const file of files) {
    mkdirSync(dirname(join(into, file)), { recursive: true });
    cpSync(join(HERE, file), join(into, file));
  }
}

test('the README install works on a fresh clone, as written', { timeout: 300000 }, () => {
  const tmp = mkdtempSync(join(tmpdir(), 'fenec-js-install-'));
  try {
    const clone = join(tmp, 'fenecdb');
    freshClone(join(clone, 'clients', 'js'));
    const app = join(tmp, 'app');
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'module' }));
    const command = readmeInstall().replaceAll('/path/to/fenecdb', clone);
    const install = spawnSync('sh', ['-c', `${command} --no-audit --no-fund`], { cwd: app, encoding: 'utf8' });
    assert.equal(install.status, 0, `${command}\n${install.stdout}\n${install.stderr}`);
    const code = "import { connect, from } from '@fenecdb/web/client';"
      + "process.stdout.write(JSON.stringify([typeof connect, from('jobs').where('id', 1).toFenecQL()]));";
    const use = spawnSync(process.execPath, ['--input-type=module', '-e', code], { cwd: app, encoding: 'utf8' });
    assert.equal(use.status, 0, use.stderr);
    assert.deepEqual(JSON.parse(use.stdout), ['function', ['get jobs where id = $1', [1]]]);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
});
