// The worker under the docs' own policy (conformance/README.md, "The worker under the docs' policy";
// the case is conformance/worker-policy.json): this SDK's Worker, with a worker token, against the
// server at FENEC_POLICY_URL that conformance/run.py started with the server README's `jobs.policy`.
// One case, `worker under the docs' policy`: every job of the file meets its fate (acked, or dead with
// its error and attempts) after the starts it expects; a worker token of another queue claims nothing
// and its extend and ack are 412; a graceful stop gives the unstarted job back and acks the running
// ones. Beyond the file, two more of the same policy: an ack with keepDone is allowed, and a token
// the policy gives no worker rules (the producer's) ends run with its 403.
import { readFileSync } from 'node:fs';
import { connect, FenecError } from '@fenecdb/web/client';

const NAME = 'worker under the docs\' policy';
const DEADLINE_MS = 60000; // generous: conditions are waited for, never assumed from a sleep
const ROOT = new URL('../../../../', import.meta.url);

class Failure extends Error {}
const check = (ok, what) => {
  if (!ok) throw new Failure(what);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, cond) {
  const end = Date.now() + DEADLINE_MS;
  while (!(await cond())) {
    if (Date.now() > end) throw new Failure(`not within ${DEADLINE_MS / 1000} s: ${what}`);
    await sleep(50);
  }
}

const isUnmet = (e) => e instanceof FenecError && e.status === 412;

async function runCase(spec, url, tokens, root) {
  const admin = connect(url, { token: root });
  const producer = connect(url, { token: tokens.producer });
  const mine = connect(url, { token: tokens.worker });
  const other = connect(url, { token: tokens.other });
  await admin.run('drop collection jobs').catch((e) => {
    if (!(e instanceof FenecError && e.status === 404)) throw e; // each SDK's runner starts from a fresh queue
  });
  await admin.run(spec.schema);
  const w = spec.worker;
  const events = [];
  const worker = mine.worker('jobs', {
    name: w.name, batch: w.batch, concurrency: w.concurrency, leaseMs: w.lease_ms, waitMs: w.wait_ms,
    maxAttempts: w.max_attempts, backoff: () => w.backoff_ms, drainTimeoutMs: w.drain_timeout_ms,
    onEvent: (e) => events.push(e),
  });
  const enqueuer = producer.worker('jobs'); // a producer's token enqueues; it never runs
  const byKey = new Map(spec.jobs.map((j) => [j.key, j]));
  for (const job of spec.jobs) {
    if (job.by === 'server token') {
      await admin.run('put jobs {queue: $1, payload: $2, run_at: now(), attempts: $3}',
        [spec.tokens.worker.queue, { key: job.key }, job.attempts]);
    } else {
      check((await enqueuer.enqueue({ key: job.key })) === 1, `enqueue ${job.key} answers 1`);
    }
  }
  const starts = new Map();
  let release;
  const stopping = new Promise((r) => (release = r));
  let checkedDone;
  const checked = new Promise((r) => (checkedDone = r));
  const handle = async (job) => {
    const key = job.payload.key;
    starts.set(key, (starts.get(key) ?? 0) + 1);
    const kind = byKey.get(key)?.behaviour ?? (key.startsWith('block') ? 'block' : 'held');
    if (kind === 'fail-always' || (kind === 'fail-once' && job.attempts === 1)) throw new Error(key);
    if (kind === 'slow') await sleep(byKey.get(key).hold_ms); // past the lease: only the heartbeat keeps it
    if (kind === 'block') await Promise.race([stopping, sleep(DEADLINE_MS)]);
    // held (leased, its owner set) while another queue's token tries it, then acked
    if (kind === 'held') await Promise.race([checked, sleep(DEADLINE_MS)]);
  };
  let failure;
  const running = worker.run(handle).catch((e) => (failure = e ?? 'rejected'));

  const rows = async () => new Map((await admin.run('get jobs')).rows.map((r) => [r.payload.key, r]));
  await until('every job settled', async () => {
    if (failure !== undefined) return true;
    const now = await rows();
    return [...byKey.values()].every((j) => (j.expect.fate === 'acked' ? !now.has(j.key) : now.get(j.key)?.run_at === null));
  });
  check(failure === undefined, `run ended: ${failure}`);
  const now = await rows();
  for (const [key, job] of byKey) {
    const exp = job.expect;
    check((starts.get(key) ?? 0) === exp.starts, `${key}: started ${starts.get(key) ?? 0} times, expected ${exp.starts}`);
    if (exp.fate === 'dead') {
      const r = now.get(key);
      check(r.error === exp.error && r.attempts === exp.attempts && r.owner === null, `${key}: ${JSON.stringify(r)}`);
    }
  }

  // The other queue's token: a ready mail job is not there for it.
  check((await enqueuer.enqueue({ key: 'left' })) === 1, 'enqueue left');
  await until('the left job started', () => (starts.get('left') ?? 0) === 1);
  const left = (await rows()).get('left');
  const foreign = other.worker('jobs', { waitMs: 0 });
  check((await foreign.claim({ wait: 0 })).length === 0, 'a worker of another queue claimed a mail job');
  for (const text of ['set jobs {run_at: now() + 60000} where id = $1 and owner = $2 require 1',
    'del jobs where id = $1 and owner = $2 require 1']) {
    const got = await other.run(text, [left.id, left.owner ?? 'w-7:1']).then(() => 'written', (e) => e);
    check(isUnmet(got), `a worker of another queue wrote a mail job: ${text} / ${got}`);
  }
  checkedDone();
  await until('the left job acked', async () => !(await rows()).has('left'));

  // The stop: two block jobs run, the third is given back. One put, so that one claim takes them all.
  await producer.run('put jobs $1', [Array.from({ length: spec.stop.jobs }, (_, n) => ({ payload: { key: `block-${n}` }, run_at: 0, attempts: 0 }))]);
  const blockStarts = () => [...starts].filter(([k]) => k.startsWith('block')).reduce((n, [, v]) => n + v, 0);
  await until('two block jobs running', () => blockStarts() === 2);
  const stopped = worker.stop();
  release();
  await Promise.race([stopped, sleep(DEADLINE_MS).then(() => { throw new Failure('run did not return after the stop'); })]);
  await running;
  check(failure === undefined, `run ended: ${failure}`);
  const after = await rows();
  const back = [...after].filter(([k]) => k.startsWith('block')).map(([, r]) => r);
  const exp = spec.stop.expect;
  check(back.length === exp.given_back, `given back ${back.length}, expected ${exp.given_back}: ${JSON.stringify(back)}`);
  check(back.every((r) => r.owner === null && r.attempts === exp.given_back_row.attempts && r.run_at !== null), JSON.stringify(back));
  const types = {};
  for (const e of events) types[e.type] = (types[e.type] ?? 0) + 1;
  check(types.released === exp.given_back && !types.lost && types.stopped === 1, JSON.stringify(types));
  const contract = JSON.parse(readFileSync(new URL('conformance/worker-contract.json', ROOT), 'utf8'));
  const known = new Set(Object.values(contract.events.type_names.js));
  check(Object.keys(types).every((t) => known.has(t)), `event types ${Object.keys(types)}`);

  // Beyond the file: the keep-done ack of the job given back, and a token without worker rules.
  const keeping = mine.worker('jobs', { name: `${w.name}-keep`, waitMs: 0, keepDone: true });
  await keeping.run(() => void keeping.stop());
  const kept = (await rows()).get(back[0].payload.key);
  check(kept && kept.owner === null && kept.run_at === null && kept.done_at !== null, `kept done: ${JSON.stringify(kept)}`);
  const refused = await producer.worker('jobs', { waitMs: 0 }).run(() => {}).then(() => 'resolved', (e) => e);
  check(refused instanceof FenecError && refused.status === 403, `a producer token's run ends with 403 / ${refused}`);
}

/** Plays the case when run.py gave a policy server; returns {passed, failed, skipped}. */
export async function runPolicyScenario({ env = process.env, only, log = console.log } = {}) {
  if (only && !NAME.includes(only)) return { passed: 0, failed: 0, skipped: 0 };
  const url = (env.FENEC_POLICY_URL ?? '').replace(/\/+$/, '');
  if (!url) {
    if (env.FENEC_REQUIRE_SERVER === '1') {
      log(`FAIL ${NAME}: FENEC_REQUIRE_SERVER=1 but FENEC_POLICY_URL is not set`);
      return { passed: 0, failed: 1, skipped: 0 };
    }
    log(`skipped ${NAME}: FENEC_POLICY_URL not set`);
    return { passed: 0, failed: 0, skipped: 1 };
  }
  try {
    const file = env.FENEC_POLICY_SCENARIO || new URL('conformance/worker-policy.json', ROOT);
    const spec = JSON.parse(readFileSync(file, 'utf8'));
    await runCase(spec, url, JSON.parse(env.FENEC_POLICY_TOKENS), env.FENEC_POLICY_ROOT_TOKEN);
  } catch (e) {
    log(`FAIL ${NAME}: ${e instanceof Failure ? e.message : `error: ${e?.stack ?? e}`}`);
    return { passed: 0, failed: 1, skipped: 0 };
  }
  log(`ok ${NAME}`);
  return { passed: 1, failed: 0, skipped: 0 };
}
