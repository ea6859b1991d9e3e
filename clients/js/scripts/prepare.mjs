// `prepare`: builds dist/ with the package's own TypeScript, the version package-lock.json pins.
// npm runs it on `npm install` here, on `npm pack`, and when another project installs this folder
// (`npm install <path>/clients/js`, the README's install). In that last case npm does not install a
// folder package's devDependencies, so when this folder has no TypeScript yet it is installed first,
// from the lockfile and without running scripts (`npm ci --ignore-scripts`); then the build runs.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(dirname(fileURLToPath(import.meta.url)));
const TSC = join(HERE, 'node_modules', 'typescript', 'bin', 'tsc');

function run(command, args) {
  const r = spawnSync(command, args, { cwd: HERE, stdio: 'inherit' });
  if (r.error) throw r.error;
  if (r.status !== 0) process.exit(r.status ?? 1);
}

if (!existsSync(TSC)) {
  // The npm that runs this script, when it says where it is; else the one on PATH.
  const npm = process.env.npm_execpath;
  const [command, first] = npm && /\.[cm]?js$/.test(npm) ? [process.execPath, [npm]] : ['npm', []];
  run(command, [...first, 'ci', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error']);
}
run(process.execPath, [TSC, '-p', 'tsconfig.json']);
