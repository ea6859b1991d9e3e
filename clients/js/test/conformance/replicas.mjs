// The replica cases (conformance/replica-scenarios.json; conformance/README.md, "Replicas"): this
// SDK's client and Worker against the primary at FENEC_PRIMARY_URL and its replica at
// FENEC_REPLICA_URL, which conformance/run.py started. One line per case (`ok <name>: ...` or
// `FAIL <name>: ...`); without those variables it plays nothing and prints nothing.
import { readFileSync } from 'node:fs';
import { connect, expr, FenecError } from '@fenecdb/web/client';

class Failure extends Error {}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

class Case {
  constructor(spec, data, primary, replica) {
    Object.assign(this, { spec, data, primary, replica, q: spec.collection, deadlineMs: data.deadline_ms });
  }

  async until(what, cond) {
    const end = Date.now() + this.deadlineMs;
    while (!(await cond())) {
      if (Date.now() > end) throw new Failure(`not within ${this.deadlineMs / 1000} s: ${what}`);
      await sleep(50);
    }
  }

  async fresh(db) {
    await db.run(`drop collection ${this.q}`).catch((e) => {
      if (!(e instanceof FenecError && e.status === 404)) throw e; // each SDK's runner starts from a fresh queue
    });
    await db.run(this.data.schema.replaceAll('{q}', this.q));
  }

  /** The collection's rows on one server, asked directly (with Fenec-After when given), over plain HTTP. */
  async rowsOn(url, after) {
    const headers = { 'content-type': 'application/json', ...(after === undefined ? {} : { 'fenec-after': String(after) }) };
    const res = await fetch(`${url}/query`, { method: 'POST', headers, body: JSON.stringify({ query: `get ${this.q}`, params: [] }) });
    if (res.status !== 200) throw new Failure(`get ${this.q} on ${url}: 200 / ${res.status} ${await res.text()}`);
    return res.json();
  }

  /** A server's held-claim gauge (the file's `held_gauge`), from its /_metrics. */
  async held(url) {
    const text = await (await fetch(`${url}/_metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith(`${this.data.held_gauge} `));
    if (line === undefined) throw new Failure(`${url}/_metrics has no ${this.data.held_gauge}`);
    return Number(line.split(' ')[1]);
  }
}

async function writesThroughAReplica(c) {
  const n = c.spec.jobs;
  const db = connect([c.replica]);
  await c.fresh(db);
  const producer = db.worker(c.q);
  for (let i = 0; i < n; i++) {
    if ((await producer.enqueue({ n: i })) !== 1) throw new Failure(`enqueue ${i}: 1 / something else`);
  }
  const onP = (await c.rowsOn(c.primary)).length;
  const onR = (await c.rowsOn(c.replica, db.seq)).length;
  if (onP !== n || onR !== n) throw new Failure(`rows on P and on R (Fenec-After ${db.seq}): ${n}, ${n} / ${onP}, ${onR}`);
  if (db.url !== c.primary) throw new Failure(`the client's primary: ${c.primary} / ${db.url}`);
  return `${n} jobs, on P and on R`;
}

async function aWorkerGivenAReplica(c) {
  const { spec } = c;
  const w = spec.worker;
  const events = [];
  const done = [];
  const worker = connect([c.replica]).worker(c.q, {
    concurrency: w.concurrency, batch: w.batch, waitMs: w.wait_ms, leaseMs: w.lease_ms, onEvent: (e) => events.push(e),
  });
  const direct = connect(c.primary);
  const running = worker.run((job) => { done.push(job.id); });
  let checks = 0;
  const settled = async (want) => {
    if ((await c.held(c.replica)) !== 0) throw new Failure(`R's ${c.data.held_gauge}: 0 / above 0 (a claim held on the replica)`);
    checks++;
    return done.length >= want && (await direct.from(c.q).count()) === 0;
  };
  try {
    await c.until(`the worker took the ${spec.jobs} jobs (P holds 0 rows)`, () => settled(spec.jobs));
    // held on the empty queue: the worker's claim waits on P (its gauge), none on R
    await c.until("the worker's claim held on P", async () => (await c.held(c.primary)) > 0);
    if ((await c.held(c.replica)) !== 0) throw new Failure(`R's ${c.data.held_gauge} while the worker is held: 0 / above 0`);
    for (let i = 0; i < spec.later; i++) {
      await direct.run(`put ${c.q} {payload: $1, run_at: now(), attempts: 0}`, [{ later: i }]);
    }
    await c.until('the job put on P while the worker was held is processed', () => settled(spec.jobs + spec.later));
  } finally {
    await worker.stop();
    await running;
  }
  const named = events.filter((e) => e.type === 'primary').map((e) => e.url);
  if (!named.includes(c.primary)) throw new Failure(`a \`primary\` event naming ${c.primary} / ${JSON.stringify(named)}`);
  return `${done.length} jobs, R's held gauge 0 at ${checks} checks`;
}

async function readsWhereTold(c) {
  const db = connect([c.primary, c.replica], { readFrom: 'replica' });
  await c.fresh(db);
  for (let i = 0; i < c.spec.rounds; i++) {
    await db.from(c.q).insert({ id: 1, payload: { round: i }, run_at: expr('now()') });
    const got = (await db.from(c.q).where('id', 1).rows()).map((r) => r.payload);
    if (JSON.stringify(got) !== JSON.stringify([{ round: i }])) {
      throw new Failure(`round ${i}: the row just written / ${JSON.stringify(got)}`);
    }
  }
  return `${c.spec.rounds} rounds`;
}

const CASES = {
  'replica: writes given only a replica reach the primary': writesThroughAReplica,
  'replica: a worker given only a replica works the primary': aWorkerGivenAReplica,
  'replica: reads where told read their own writes': readsWhereTold,
};

export async function runReplicaCases({ env = process.env, only, log = console.log } = {}) {
  const primary = (env.FENEC_PRIMARY_URL ?? '').replace(/\/+$/, '');
  const replica = (env.FENEC_REPLICA_URL ?? '').replace(/\/+$/, '');
  const file = env.FENEC_REPLICA_SCENARIOS;
  if (!primary || !replica || !file) return { passed: 0, failed: 0 };
  const data = JSON.parse(readFileSync(file, 'utf8'));
  let passed = 0;
  let failed = 0;
  for (const spec of data.cases) {
    if (only && !spec.name.includes(only)) continue;
    try {
      const play = CASES[spec.name];
      if (play === undefined) throw new Failure(`a case this runner knows / ${JSON.stringify(spec.name)}`);
      const summary = await play(new Case(spec, data, primary, replica));
      passed++;
      log(`ok ${spec.name}: ${summary}`);
    } catch (e) {
      failed++;
      log(`FAIL ${spec.name}: ${e instanceof Failure ? e.message : `error: ${e?.stack ?? e}`}`);
    }
  }
  return { passed, failed };
}
