// The worker under the docs' own policy (conformance/README.md, "The worker under the docs' policy"):
// a server started by this runner with the rules of the server README's "Access: a job-queue setup"
// (its `jobs.policy`, read from the README, never copied), tokens minted by that server as the README
// mints them, and the queue created with the README's statement. Two scenarios:
//
//   policy: the worker under the docs' policy   a producer token enqueues; this SDK's Worker, with a
//       worker token of queue `mail`, claims, keeps a slow job by its heartbeat, acks, fails and
//       retries, makes a dead letter, gives back on a stop, and acks with keepDone: no `lost`, no
//       `retry`, run never rejects; the rows are what the events say.
//   policy: a worker token of another queue is refused   a worker of queue `image` claims nothing of
//       queue `mail`'s ready job, and its ack and extend of a job a `mail` claim holds are refused
//       (412); a token the policy gives no worker rules (the producer's) ends run with the 403.
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { connect, FenecError } from '@fenecdb/web/client';

const run = promisify(execFile);
const ROOT = new URL('../../../../', import.meta.url);
const README = new URL('server/README.md', ROOT);

class Failure extends Error {}
const check = (ok, what) => {
  if (!ok) throw new Failure(what);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Waits until `cond()` holds, failing after `ms` (far above what any machine needs). */
async function until(cond, what, ms = 60000) {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Failure(`waited ${ms} ms for ${what}`);
    await sleep(10);
  }
}

/** The README's setup: its policy file's rules and its `create collection jobs` statement. */
export function readmeSetup(text = readFileSync(README, 'utf8')) {
  const policy = /cat > jobs\.policy <<'RULES'\n([\s\S]*?)\nRULES\n/.exec(text);
  const create = /"query":"(create collection jobs [^"]*)"/.exec(text);
  if (!policy || !create) throw new Failure('server/README.md: its jobs.policy heredoc and create collection jobs');
  return { policy: `${policy[1]}\n`, create: create[1] };
}

/** fenec-server under the README's policy, in memory on a free loopback port; `mint(claims)` a token. */
async function policyServer(exe, policy) {
  const dir = mkdtempSync(join(tmpdir(), 'fenec-js-policy-'));
  const secret = join(dir, 'jwt.secret');
  const rules = join(dir, 'jobs.policy');
  writeFileSync(secret, randomBytes(48).toString('base64'));
  writeFileSync(rules, policy);
  const serverToken = randomBytes(24).toString('base64');
  const child = spawn(exe, ['--http', '127.0.0.1:0', '--jwt-secret-file', secret, '--policy', rules], {
    env: { ...process.env, FENEC_HTTP_TOKEN: serverToken },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`fenec-server did not listen in 60 s:\n${log}`)), 60000);
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      log += chunk;
      const m = /listening on: (http:\/\/\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(m[1].replace(/\/+$/, ''));
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`fenec-server exited with ${code}:\n${log}`));
    });
  });
  return {
    url,
    serverToken,
    mint: async (claims) => (await run(exe, ['--jwt-secret-file', secret, '--mint-token', JSON.stringify(claims)])).stdout.trim(),
    stop: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A fetch that counts, per kind of statement, the calls answered 2xx. */
function counting() {
  const answered = { claim: 0, extend: 0 };
  const fetch = async (url, init) => {
    const res = await globalThis.fetch(url, init);
    const { query } = JSON.parse(init.body);
    if (res.ok && query.endsWith('returning *')) answered.claim++;
    if (res.ok && /^set jobs \{run_at: now\(\) \+ \$1\}/.test(query)) answered.extend++;
    return res;
  };
  return { fetch, answered };
}

const of = (events, type) => events.filter((e) => e.type === type);

async function underThePolicy(srv, setup) {
  const admin = connect(srv.url, { token: srv.serverToken });
  await admin.run(setup.create);
  const producer = connect(srv.url, { token: await srv.mint({ sub: 'shop', role: 'producer', queue: 'mail' }) }).worker('jobs');
  const workerToken = await srv.mint({ sub: 'w-7', role: 'worker', queue: 'mail' });
  for (const payload of [{ name: 'ok' }, { name: 'flaky' }, { name: 'bad' }, { name: 'slow', sleep_ms: 4000 }]) {
    check((await producer.enqueue(payload)) === 1, `enqueue ${payload.name}: 1`);
  }
  const byId = new Map((await admin.from('jobs').select('id', 'queue', 'payload').rows()).map((r) => [r.id, r]));
  check([...byId.values()].every((r) => r.queue === 'mail'), 'the producer\'s jobs land in its own queue');
  const name = (e) => byId.get(e.id)?.payload.name;

  const counts = counting();
  const events = [];
  const worker = connect(srv.url, { token: workerToken, fetch: counts.fetch }).worker('jobs', {
    name: 'mail-1', batch: 4, concurrency: 4, leaseMs: 3000, heartbeatMs: 300, waitMs: 500,
    maxAttempts: 2, backoff: () => 100, onEvent: (e) => events.push(e),
  });
  const running = worker.run(async (job) => {
    const p = job.payload;
    if (p.sleep_ms) await sleep(p.sleep_ms);
    if (p.name === 'bad' || (p.name === 'flaky' && job.attempts === 1)) throw new Error(`${p.name} at ${job.attempts}`);
  });
  const ended = running.then(() => 'resolved', (e) => e);
  await until(() => of(events, 'done').length === 3 && of(events, 'dead').length === 1, 'ok, flaky and slow done, bad dead');
  await worker.stop();
  check((await ended) === 'resolved', `run resolves after stop / ${await ended}`);
  check(of(events, 'lost').length === 0 && of(events, 'retry').length === 0, `no lost, no retry / ${JSON.stringify(of(events, 'lost').concat(of(events, 'retry')))}`);
  check(JSON.stringify(of(events, 'done').map(name).sort()) === '["flaky","ok","slow"]', 'done: ok, flaky, slow');
  check(JSON.stringify(of(events, 'failed').map(name).sort()) === '["bad","flaky"]', 'failed: bad and flaky at attempt 1');
  check(counts.answered.extend >= 1, 'the slow job outlived its lease by the heartbeat\'s extends');
  const left = await admin.from('jobs').select('payload', 'owner', 'run_at', 'attempts', 'error').rows();
  check(left.length === 1 && left[0].payload.name === 'bad' && left[0].owner === null && left[0].run_at === null
    && left[0].attempts === 2 && left[0].error === 'bad at 2', `the dead letter alone is left / ${JSON.stringify(left)}`);

  // The give-back: a worker stopped by its first job gives the second back, its attempt taken off.
  for (const n of ['g1', 'g2']) await producer.enqueue({ name: n });
  const stopping = connect(srv.url, { token: workerToken }).worker('jobs', {
    name: 'mail-2', batch: 2, concurrency: 1, waitMs: 500, onEvent: (e) => events.push(e),
  });
  await stopping.run(() => void stopping.stop());
  const back = await admin.from('jobs').where('owner', null).where('attempts', 0).select('id', 'payload').rows();
  check(back.length === 1 && of(events, 'released').length === 1 && of(events, 'released')[0].id === back[0].id,
    `one job given back, ready, attempts 0 / ${JSON.stringify(back)}`);

  // keepDone: the ack that keeps the job, allowed by the same rules.
  const keeping = connect(srv.url, { token: workerToken }).worker('jobs', { name: 'mail-3', waitMs: 500, keepDone: true });
  await keeping.run(() => void keeping.stop());
  const kept = await admin.from('jobs').where('id', back[0].id).select('owner', 'run_at', 'done_at').rows();
  check(kept.length === 1 && kept[0].owner === null && kept[0].run_at === null && kept[0].done_at !== null, `kept done / ${JSON.stringify(kept)}`);
  return `${of(events, 'done').length} done, ${of(events, 'failed').length} failed, 1 dead, 1 released, 1 kept, ${counts.answered.extend} extends`;
}

async function anotherQueue(srv, setup) {
  const admin = connect(srv.url, { token: srv.serverToken });
  await admin.run(setup.create);
  const producerToken = await srv.mint({ sub: 'shop', role: 'producer', queue: 'mail' });
  await connect(srv.url, { token: producerToken }).worker('jobs').enqueue({ name: 'm' });

  const counts = counting();
  const imageDb = connect(srv.url, { token: await srv.mint({ sub: 'w-8', role: 'worker', queue: 'image' }), fetch: counts.fetch });
  const image = imageDb.worker('jobs', { name: 'image-1', waitMs: 200 });
  const started = [];
  const running = image.run((job) => started.push(job.id));
  await until(() => counts.answered.claim >= 3, 'three claims of the image worker answered');
  await image.stop();
  await running;
  check(started.length === 0, 'the image worker took nothing of queue mail');
  const [row] = await admin.from('jobs').select('owner', 'attempts').rows();
  check(row.owner === null && row.attempts === 0, `the mail job is untouched / ${JSON.stringify(row)}`);

  const mail = connect(srv.url, { token: await srv.mint({ sub: 'w-7', role: 'worker', queue: 'mail' }) }).worker('jobs', { name: 'mail-1', waitMs: 0 });
  const [job] = await mail.claim();
  check(job !== undefined, 'the mail worker claims the job');
  const mine = imageDb.from('jobs').where('id', job.id).where('owner', job.owner);
  for (const [what, call] of [['ack', () => mine.delete({ require: 1 })], ['extend', () => mine.update({ run_at: null }, { require: 1 })]]) {
    const got = await call().then(() => 'done', (e) => e);
    check(got instanceof FenecError && got.status === 412, `the image token's ${what} of a mail job: 412 / ${got}`);
  }
  check(await job.ack(), 'the mail worker acks it');

  const producerAsWorker = connect(srv.url, { token: producerToken }).worker('jobs', { name: 'p', waitMs: 200 });
  const refused = await producerAsWorker.run(() => {}).then(() => 'resolved', (e) => e);
  check(refused instanceof FenecError && refused.status === 403, `a token without worker rules ends run with 403 / ${refused}`);
  return 'claimed nothing, ack 412, extend 412, run ended by 403';
}

const SCENARIOS = [
  ['policy: the worker under the docs\' policy and token (claim, heartbeat, ack, fail, dead letter, give back, keep done)', underThePolicy],
  ['policy: a worker token of another queue is refused', anotherQueue],
];

/**
 * Runs the policy scenarios when a live run was asked for (`live`): each on a server of its own
 * (`exe`, the repository's .venv/bin/fenec-server unless FENEC_SERVER names another).
 */
export async function runPolicyScenarios({ live, only, requireServer = false, exe, log = console.log }) {
  const picked = SCENARIOS.filter(([name]) => !only || name.includes(only));
  const server = exe ?? new URL('.venv/bin/fenec-server', ROOT).pathname;
  let why;
  if (!live) why = 'FENEC_URL not set';
  else if (!existsSync(server)) why = `no fenec-server at ${server}`;
  if (why !== undefined) {
    for (const [name] of picked) log(`skipped ${name}: ${why}`);
    const failed = requireServer && picked.length > 0 ? 1 : 0;
    if (failed) log(`FAIL policy scenarios: FENEC_REQUIRE_SERVER=1 and ${why}`);
    return { passed: 0, failed, skipped: picked.length };
  }
  let passed = 0;
  let failed = 0;
  for (const [name, body] of picked) {
    let srv;
    try {
      const setup = readmeSetup();
      srv = await policyServer(server, setup.policy);
      log(`ok ${name} (${await body(srv, setup)})`);
      passed++;
    } catch (e) {
      log(`FAIL ${name}: ${e instanceof Failure ? e.message : `error: ${e?.stack ?? e}`}`);
      failed++;
    } finally {
      await srv?.stop();
    }
  }
  return { passed, failed, skipped: 0 };
}
