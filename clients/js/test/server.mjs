// Starts a real fenec-server for the live tests: in memory (or on a file), on a free loopback port, read from its
// `listening on: http://<addr>` line; stopped with SIGTERM.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const SERVER = `${ROOT}.venv/bin/fenec-server`;

/** A server started by someone else, for the live tests of live.mjs to use instead of one of their own (the wire
 * corpus records them through its proxy so, conformance/wire/README.md); undefined when not given. */
export const GIVEN_URL = process.env.FENEC_TEST_URL ? process.env.FENEC_TEST_URL.replace(/\/+$/, '') : undefined;

/** Why the live tests cannot run here, or undefined when they can. */
export function liveSkipReason() {
  if (GIVEN_URL) return undefined;
  if (!existsSync(SERVER)) return 'no fenec-server in the repository venv (.venv/bin/fenec-server)';
  return undefined;
}

/** A loopback port free right now, for a server that must come back where it was. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** `port` 0 (the default) binds a free one; `extraArgs` such as `['--file', path]`. */
export async function startServer(extraArgs = [], { port = 0 } = {}) {
  const child = spawn(SERVER, ['--http', `127.0.0.1:${port}`, ...extraArgs], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`fenec-server did not say where it listens in 60 s:\n${log}`)), 60000);
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      log += chunk;
      const m = /listening on: (http:\/\/\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(m[1].replace(/\/+$/, ''));
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`fenec-server exited with ${code} before listening:\n${log}`));
    });
  });
  child.stderr.on('data', () => {}); // keep draining
  return {
    url,
    log: () => log,
    stop: () =>
      new Promise((resolve) => {
        if (child.exitCode !== null) return resolve(child.exitCode);
        const kill = setTimeout(() => child.kill('SIGKILL'), 5000);
        child.once('exit', (code) => {
          clearTimeout(kill);
          resolve(code);
        });
        child.kill('SIGTERM');
      }),
  };
}
