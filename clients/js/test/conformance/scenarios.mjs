// The worker-scenarios runner (conformance.md Part B): replays each scenario against a live server
// with this SDK's real claim, ack, extend, fail and pop calls, its `wait` and `signal`, and its
// idempotency key; the text of each kind of call is first checked against the spec's template.
import { readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { connect, raw, expr, inc, FenecError } from '@fenecdb/web/client';

const DEFAULT_SCHEMA = 'create collection {q} (payload json, run_at timestamp @sorted, owner text, attempts int, error text)';

const TEMPLATES = {
  enqueue: 'put {q} {payload: $1, run_at: now() + $2, attempts: $3}',
  claim: 'set {q} {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3} where run_at <= now() order run_at asc limit <batch> returning *',
  ack: 'del {q} where id = $1 and owner = $2 require 1',
  extend: 'set {q} {run_at: now() + $1} where id = $2 and owner = $3 require 1',
  fail: 'set {q} {owner: $1, error: $2, run_at: case when attempts >= $3 then null else now() + $4 * attempts * attempts end} where id = $5 and owner = $6 require 1',
  pop: 'del {q} where run_at <= now() order run_at asc limit <n> returning *',
  resend: 'set {q} {run_at: now(), attempts: $1, error: $2} where id = $3 and run_at is null',
};

class StepFailure extends Error {}

const now = () => performance.now();
// a pause that takes its abort listener off when it ends: the swarm's workers pause hundreds of times
// on one shared signal, and a listener left behind by each pause would pile up until the stop
const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const onAbort = () => { clearTimeout(t); reject(signal.reason); };
    const t = setTimeout(() => { signal?.removeEventListener('abort', onAbort); resolve(); }, Math.max(0, ms));
    signal?.addEventListener('abort', onAbort, { once: true });
  });

const isAbort = (e) => e?.name === 'AbortError';
const isUnmet = (e) => e instanceof FenecError && e.status === 412;

/**
 * The queue operations of one scenario collection, each only through the builder and its write
 * calls. Before the first call of each kind, the text-only twin is checked against its template.
 */
export class QueueOps {
  constructor(db, q) {
    this.db = db;
    this.q = q;
    this.checked = new Set();
  }

  on(db) {
    const other = new QueueOps(db, this.q);
    other.checked = this.checked;
    return other;
  }

  #check(kind, stmt, fill = {}) {
    if (this.checked.has(kind)) return;
    let want = TEMPLATES[kind].replaceAll('{q}', this.q);
    for (const [k, v] of Object.entries(fill)) want = want.replace(`<${k}>`, String(v));
    if (stmt[0] !== want) throw new StepFailure(`${kind} text: ${JSON.stringify(want)} / ${JSON.stringify(stmt[0])}`);
    this.checked.add(kind);
  }

  from(db = this.db) {
    return db.from(this.q);
  }

  async enqueue(payload, delayMs = 0) {
    const doc = { payload, run_at: expr('now() + ?', delayMs), attempts: 0 };
    this.#check('enqueue', this.from().toInsert(doc));
    return this.from().insert(doc);
  }

  #claimChain(db, batch) {
    return this.from(db).where(raw('run_at <= now()')).order('run_at').limit(batch);
  }

  async claim({ owner, batch, leaseMs, waitMs, idempotencyKey, signal }) {
    const patch = { owner, run_at: expr('now() + ?', leaseMs), attempts: inc(1) };
    this.#check('claim', this.#claimChain(this.db, batch).toUpdate(patch, { returning: true }), { batch });
    const db = idempotencyKey === undefined ? this.db : this.db.withIdempotencyKey(idempotencyKey);
    const opts = { returning: true, signal };
    if (waitMs !== undefined) opts.wait = waitMs;
    const rows = await this.#claimChain(db, batch).update(patch, opts);
    return { rows, replayed: db.replayed };
  }

  #mine(id, owner) {
    return this.from().where('id', id).where('owner', owner);
  }

  /** 'ok' when the write answered 1, 'unmet' on a 412. */
  async #settle(p) {
    try {
      const n = await p;
      return n === 1 ? 'ok' : `answered ${n}`;
    } catch (e) {
      if (isUnmet(e)) return 'unmet';
      throw e;
    }
  }

  ack(id, owner) {
    this.#check('ack', this.#mine(id, owner).toDelete({ require: 1 }));
    return this.#settle(this.#mine(id, owner).delete({ require: 1 }));
  }

  extend(id, owner, leaseMs) {
    const patch = { run_at: expr('now() + ?', leaseMs) };
    this.#check('extend', this.#mine(id, owner).toUpdate(patch, { require: 1 }));
    return this.#settle(this.#mine(id, owner).update(patch, { require: 1 }));
  }

  fail(id, owner, error, deadAfter, backoffMs) {
    const patch = {
      owner: null,
      error,
      run_at: expr('case when attempts >= ? then null else now() + ? * attempts * attempts end', deadAfter, backoffMs),
    };
    this.#check('fail', this.#mine(id, owner).toUpdate(patch, { require: 1 }));
    return this.#settle(this.#mine(id, owner).update(patch, { require: 1 }));
  }

  async pop(limit) {
    const chain = this.from().where(raw('run_at <= now()')).order('run_at').limit(limit);
    this.#check('pop', chain.toDelete({ returning: true }), { n: limit });
    return chain.delete({ returning: true });
  }

  async resend(id) {
    const chain = this.from().where('id', id).where('run_at', null);
    const patch = { run_at: expr('now()'), attempts: 0, error: null };
    this.#check('resend', chain.toUpdate(patch));
    return chain.update(patch);
  }

  async counts() {
    const q = this.from();
    const [dead, ready, leased, delayed, total] = await Promise.all([
      q.where('run_at', null).count(),
      q.where(raw('run_at <= now()')).count(),
      q.where(raw('run_at > now()')).where('owner', '!=', null).count(),
      q.where(raw('run_at > now()')).where('owner', null).count(),
      q.count(),
    ]);
    return { ready, leased, delayed, dead, total };
  }
}

const keyOf = (row) => row?.payload?.key;

/** One script scenario: steps in order on one connection, exact answers. */
async function runScript(sc, ops, ctx) {
  const tol = sc.tolerance_ms ?? 150;
  const owners = new Map(); // worker -> counter
  const lastClaimOf = new Map(); // `${worker}\u0000${key}` -> owner
  const ids = new Map(); // key -> id
  let lastClaim = null; // {idempotency_key, owner}
  const notes = [];

  const fail = (where, expected, got) => {
    throw new StepFailure(`${where}: ${typeof expected === 'string' ? expected : JSON.stringify(expected)} / ${typeof got === 'string' ? got : JSON.stringify(got)}`);
  };

  const idOf = async (key, o) => {
    if (ids.has(key)) return ids.get(key);
    const row = await o.from().where('payload.key', key).first();
    if (row === null) fail(`job ${key}`, 'a row', 'none');
    ids.set(key, row.id);
    return row.id;
  };

  async function claim(args, expect, o, where) {
    let owner;
    if (args.idempotency_key !== undefined && lastClaim?.idempotency_key === args.idempotency_key) owner = lastClaim.owner;
    else {
      const n = (owners.get(args.worker) ?? 0) + 1;
      owners.set(args.worker, n);
      owner = `${args.worker}:${n}`;
    }
    lastClaim = { idempotency_key: args.idempotency_key, owner };
    const ctl = new AbortController();
    let timer;
    if (args.cancel_after_ms !== undefined) timer = setTimeout(() => ctl.abort(), args.cancel_after_ms);
    const started = now();
    let result;
    let cancelled = false;
    try {
      result = await o.claim({
        owner,
        batch: args.batch,
        leaseMs: args.lease_ms,
        waitMs: args.wait_ms,
        // Keys live in one namespace on an open server, where every SDK runs the same scenarios at
        // once: the collection's name makes this run's key its own.
        idempotencyKey: args.idempotency_key === undefined ? undefined : `${o.q}:${args.idempotency_key}`,
        signal: ctl.signal,
      });
    } catch (e) {
      if (!isAbort(e)) throw e;
      cancelled = true;
    } finally {
      clearTimeout(timer);
    }
    const took = now() - started;
    if (result) {
      for (const row of result.rows) {
        ids.set(keyOf(row), row.id);
        lastClaimOf.set(`${args.worker}\u0000${keyOf(row)}`, owner);
      }
    }
    if (!expect) return;
    if (expect.cancelled !== undefined) {
      if (expect.cancelled !== cancelled) fail(`${where} cancelled`, expect.cancelled, cancelled);
      if (cancelled && args.cancel_after_ms !== undefined && took > args.cancel_after_ms + tol) {
        fail(`${where} cancelled within`, `${args.cancel_after_ms + tol} ms`, `${Math.round(took)} ms`);
      }
    } else if (cancelled) fail(where, 'an answer', 'cancelled');
    if (expect.keys !== undefined) {
      const got = result.rows.map(keyOf);
      if (JSON.stringify(got) !== JSON.stringify(expect.keys)) fail(`${where} keys`, expect.keys, got);
    }
    if (expect.attempts !== undefined) {
      const got = result.rows.map((r) => r.attempts);
      if (JSON.stringify(got) !== JSON.stringify(expect.attempts)) fail(`${where} attempts`, expect.attempts, got);
    }
    if (expect.min_ms !== undefined && took < expect.min_ms - tol) fail(`${where} took`, `at least ${expect.min_ms} ms`, `${Math.round(took)} ms`);
    if (expect.max_ms !== undefined && took > expect.max_ms + tol) fail(`${where} took`, `at most ${expect.max_ms} ms`, `${Math.round(took)} ms`);
    if (expect.replayed !== undefined && result.replayed !== expect.replayed) fail(`${where} replayed`, expect.replayed, result.replayed);
  }

  function ownerFor(args) {
    if (args.claim !== undefined && args.claim !== 'last') return `${args.worker}:${args.claim}`;
    const owner = lastClaimOf.get(`${args.worker}\u0000${args.key}`);
    if (owner === undefined) fail(`${args.worker} on ${args.key}`, 'a claim of the job', 'none');
    return owner;
  }

  async function step(s, k, o) {
    const where = `step ${k + 1}`;
    const actions = Object.keys(s).filter((x) => x !== 'expect' && x !== 'note');
    if (actions.length !== 1) fail(where, 'one action', actions);
    const action = actions[0];
    const args = s[action];
    const expect = s.expect;
    switch (action) {
      case 'enqueue': {
        for (const job of args) {
          const n = await o.enqueue({ ...(job.payload ?? {}), key: job.key }, job.delay_ms ?? 0);
          if (expect?.affected !== undefined && n !== expect.affected) fail(`${where} enqueue ${job.key}`, { affected: expect.affected }, { affected: n });
        }
        return;
      }
      case 'claim':
        return claim(args, expect, o, `${where} claim`);
      case 'ack':
      case 'extend':
      case 'fail': {
        const owner = ownerFor(args);
        const id = await idOf(args.key, o);
        let got;
        if (action === 'ack') got = await o.ack(id, owner);
        else if (action === 'extend') got = await o.extend(id, owner, args.lease_ms ?? 30000);
        else got = await o.fail(id, owner, args.error ?? 'failed', args.dead_after ?? 5, args.backoff_ms ?? 1000);
        if (expect !== undefined && got !== expect) fail(`${where} ${action} ${args.key}`, expect, got);
        return;
      }
      case 'pop': {
        const rows = await o.pop(args.limit);
        if (expect?.keys !== undefined && JSON.stringify(rows.map(keyOf)) !== JSON.stringify(expect.keys)) {
          fail(`${where} pop keys`, expect.keys, rows.map(keyOf));
        }
        return;
      }
      case 'resend': {
        const n = await o.resend(await idOf(args.key, o));
        if (expect?.affected !== undefined && n !== expect.affected) fail(`${where} resend`, { affected: expect.affected }, { affected: n });
        return;
      }
      case 'sleep_ms':
        return sleep(args, ctx.signal);
      case 'counts': {
        const got = await o.counts();
        for (const [name, want] of Object.entries(expect ?? {})) {
          if (got[name] !== want) fail(`${where} counts ${name}`, want, got[name]);
        }
        notes.push(got);
        return;
      }
      case 'during': {
        const inner = args.step;
        if (!inner?.claim) fail(where, 'a claim step inside during', inner);
        const second = o.on(ctx.connectAgain());
        const held = claim(inner.claim, expect ?? inner.expect, o, `${where} during claim`);
        held.catch(() => {});
        await sleep(args.after_ms ?? 0, ctx.signal);
        for (const [j, t] of (args.then ?? []).entries()) await step(t, j, second).catch((e) => {
          if (e instanceof StepFailure) throw new StepFailure(`${where} then ${e.message}`);
          throw e;
        });
        return held;
      }
      default:
        fail(where, 'a known action', action);
    }
  }

  for (const [k, s] of (sc.steps ?? []).entries()) {
    if (ctx.signal.aborted) throw ctx.signal.reason;
    await step(s, k, ops);
  }
  return `${sc.steps.length} steps`;
}

/** Checks one invariant against its expectation: a number, {min} or {max}. */
function meets(got, want) {
  if (typeof want === 'number') return got === want;
  if (want && typeof want === 'object') {
    if (want.min !== undefined && got < want.min) return false;
    if (want.max !== undefined && got > want.max) return false;
    return true;
  }
  return false;
}

/** One swarm scenario: producers and workers at once, then the invariants of B.4.2. */
async function runSwarm(sc, ops, ctx) {
  const tol = sc.tolerance_ms ?? 150;
  const w = sc.workers;
  const deadAfter = sc.dead_after ?? 5;
  const backoffMs = sc.backoff_ms ?? 1000;
  const jobs = [];
  for (const group of sc.jobs ?? []) {
    for (let i = 0; i < group.count; i++) jobs.push({ key: `j${jobs.length + 1}`, behaviour: group.behaviour, delay: group.delay_ms ?? 0 });
  }
  const byKey = new Map(jobs.map((j) => [j.key, j]));
  const claims = new Map(); // key -> [{owner, at, leaseEnd, closedAt, attempts}]
  const acks = new Map(); // key -> number of acks answered 1
  const deadKeys = new Set();
  const enqueuedAt = new Map();
  let stale = 0;
  let maxAttempts = 0;
  let claimedWhileLeased = 0;
  let claimedBeforeDue = 0;
  let reclaimedAfterLapse = 0;
  const stop = new AbortController();
  // every worker of the swarm waits on this one signal at once (a held claim and a pause each): a
  // listener per wait in flight, so the ceiling is the swarm's, not Node's default 10
  setMaxListeners(64, stop.signal);
  const onOuter = () => stop.abort(ctx.signal.reason);
  ctx.signal.addEventListener('abort', onOuter, { once: true });
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const checkDone = () => {
    if (acks.size + deadKeys.size >= jobs.length) finish();
  };

  // conformance/README.md, Timing: a claim counts as made when its answer came, its lease as ending
  // lease_ms after its request was sent (the server starts the lease when it runs the claim, which a
  // loaded machine may answer long after)
  const record = (key, owner, attempts, sent) => {
    const at = now();
    const job = byKey.get(key);
    const list = claims.get(key) ?? [];
    const prev = list.at(-1);
    if (prev && prev.closedAt === undefined) {
      if (at < prev.leaseEnd - tol) claimedWhileLeased++;
      else if (job?.behaviour === 'forget') reclaimedAfterLapse++;
    }
    if (job && job.delay > 0 && at < enqueuedAt.get(key) + job.delay - tol) claimedBeforeDue++;
    const c = { owner, at, leaseEnd: sent + w.lease_ms, attempts };
    list.push(c);
    claims.set(key, list);
    maxAttempts = Math.max(maxAttempts, attempts);
    return c;
  };

  const settle = (r) => {
    if (r === 'unmet') stale++;
    return r;
  };

  async function work(o, row, c) {
    const key = keyOf(row);
    const job = byKey.get(key);
    const attempts = row.attempts;
    const ack = async () => {
      const sent = now();
      const r = settle(await o.ack(row.id, c.owner));
      if (r === 'ok') {
        c.closedAt = sent;
        acks.set(key, (acks.get(key) ?? 0) + 1);
        checkDone();
      }
    };
    const failIt = async () => {
      const sent = now();
      const r = settle(await o.fail(row.id, c.owner, `failed attempt ${attempts}`, deadAfter, backoffMs));
      if (r === 'ok') {
        c.closedAt = sent;
        if (attempts >= deadAfter) {
          deadKeys.add(key);
          checkDone();
        }
      }
    };
    switch (job?.behaviour) {
      case 'ok':
        return ack();
      case 'fail_once':
        return attempts === 1 ? failIt() : ack();
      case 'fail_always':
        return failIt();
      case 'forget':
        return attempts === 1 ? undefined : ack();
      case 'slow': {
        const until = now() + 2.5 * w.lease_ms;
        const every = w.lease_ms / 3;
        while (now() < until) {
          await sleep(Math.min(every, until - now()), stop.signal);
          if (now() >= until) break;
          const sent = now();
          const r = settle(await o.extend(row.id, c.owner, w.lease_ms));
          if (r !== 'ok') return;
          c.leaseEnd = sent + w.lease_ms;
        }
        return ack();
      }
      default:
        throw new StepFailure(`job ${key}: unknown behaviour ${job?.behaviour}`);
    }
  }

  async function worker(i) {
    const o = ops.on(ctx.connectAgain());
    let counter = 0;
    while (!stop.signal.aborted) {
      const owner = `w${i + 1}:${++counter}`;
      let rows;
      const sent = now();
      try {
        ({ rows } = await o.claim({ owner, batch: w.batch, leaseMs: w.lease_ms, waitMs: w.wait_ms, signal: stop.signal }));
      } catch (e) {
        if (stop.signal.aborted) return;
        throw e;
      }
      const taken = rows.map((row) => [row, record(keyOf(row), owner, row.attempts, sent)]);
      await Promise.all(taken.map(([row, c]) => work(o, row, c).catch((e) => {
        if (!stop.signal.aborted) throw e;
      })));
    }
  }

  async function producer(p, share, spreadMs) {
    const o = ops.on(ctx.connectAgain());
    const started = now();
    for (const [k, job] of share.entries()) {
      const due = started + (share.length > 1 ? (spreadMs * k) / (share.length - 1) : 0);
      if (due > now()) await sleep(due - now(), stop.signal);
      enqueuedAt.set(job.key, now());
      const n = await o.enqueue({ key: job.key }, job.delay);
      if (n !== 1) throw new StepFailure(`enqueue ${job.key}: {"affected":1} / ${JSON.stringify({ affected: n })}`);
    }
  }

  const pc = sc.producers?.count ?? 1;
  const shares = Array.from({ length: pc }, () => []);
  jobs.forEach((job, k) => shares[k % pc].push(job));
  const running = [
    ...Array.from({ length: w.count }, (_, i) => worker(i)),
    ...shares.map((share, p) => producer(p, share, sc.producers?.spread_ms ?? 0)),
  ];
  const failed = Promise.all(running).then(() => new Promise(() => {}));
  try {
    await Promise.race([finished, failed]);
  } finally {
    stop.abort(new DOMException('the swarm is done', 'AbortError'));
    ctx.signal.removeEventListener('abort', onOuter);
    await Promise.allSettled(running);
  }
  if (ctx.signal.aborted) throw ctx.signal.reason;

  const counts = await ops.counts();
  const deadRows = await ops.from().where('run_at', null).rows();
  const left = await ops.from().where('run_at', '!=', null).count();
  const got = {
    acked: [...acks.values()].filter((n) => n >= 1).length,
    acked_twice: [...acks.values()].filter((n) => n > 1).length,
    dead: counts.dead,
    left,
    claimed_while_leased: claimedWhileLeased,
    claimed_before_due: claimedBeforeDue,
    reclaimed_after_lapse: reclaimedAfterLapse,
    stale,
    max_attempts: maxAttempts,
  };
  const without = deadRows.filter((r) => r.error === null || r.error === undefined).length;
  if (without > 0) throw new StepFailure(`dead: every dead row keeps its error / ${without} without`);
  for (const [name, want] of Object.entries(sc.expect ?? {})) {
    if (!(name in got)) throw new StepFailure(`${name}: a known invariant / unknown`);
    if (!meets(got[name], want)) throw new StepFailure(`${name}: ${JSON.stringify(want)} / ${got[name]}`);
  }
  return Object.entries(got).map(([k, v]) => `${k} ${v}`).join(', ');
}

/** Whether the server answers its health check. */
async function reachable(url) {
  try {
    const res = await fetch(`${url}/_health`, { signal: AbortSignal.timeout(3000) });
    await res.arrayBuffer();
    return res.ok;
  } catch {
    return false;
  }
}

/**
 * Runs a scenarios file. Prints one line per scenario and the tally; returns {passed, failed,
 * skipped}, `failed` counting one more when the file cannot be read or the required server is
 * not there.
 */
export async function runScenarios(file, { url, token, only, requireServer = false, log = console.log } = {}) {
  let doc;
  try {
    doc = JSON.parse(readFileSync(file, 'utf8'));
    if (!doc || !Array.isArray(doc.scenarios)) throw new Error('a scenarios file is {"format": 1, "scenarios": [...]}');
    if (doc.format !== 1) throw new Error(`format ${doc.format}, not 1`);
  } catch (e) {
    log(`FAIL scenarios ${file}: cannot read it: ${e.message}`);
    log(`scenarios ${file}: 0 ok, 1 FAIL, 0 skipped`);
    return { passed: 0, failed: 1, skipped: 0 };
  }
  const picked = doc.scenarios.filter((sc) => !only || String(sc.name).includes(only));
  let passed = 0;
  let failed = 0;
  let skipped = 0;
  const base = url ? url.replace(/\/+$/, '') : undefined;
  let why;
  if (!base) why = 'FENEC_URL not set';
  else if (!(await reachable(base))) why = `no server answers at ${base}`;
  if (why !== undefined) {
    if (requireServer) {
      log(`FAIL scenarios ${file}: FENEC_REQUIRE_SERVER=1 and ${why}`);
      failed++;
    }
    for (const sc of picked) {
      log(`skipped ${sc.name}: ${why}`);
      skipped++;
    }
    log(`scenarios ${file}: ${passed} ok, ${failed} FAIL, ${skipped} skipped`);
    return { passed, failed, skipped };
  }

  for (const sc of picked) {
    const q = `${sc.prefix ?? 'q'}_js_${randomBytes(4).toString('hex')}`;
    const connectAgain = () => connect(base, token ? { token } : {});
    const db = connectAgain();
    const ops = new QueueOps(db, q);
    const ctl = new AbortController();
    const timeoutMs = sc.timeout_ms ?? 30000;
    const timer = setTimeout(() => ctl.abort(new StepFailure(`timeout: done within ${timeoutMs} ms / not done`)), timeoutMs);
    let line;
    try {
      await db.run((sc.schema ?? DEFAULT_SCHEMA).replaceAll('{q}', q));
      const ctx = { signal: ctl.signal, connectAgain };
      const body = sc.kind === 'swarm' ? runSwarm(sc, ops, ctx) : sc.kind === 'script' ? runScript(sc, ops, ctx) : Promise.reject(new StepFailure(`kind: script or swarm / ${sc.kind}`));
      const aborted = new Promise((_, reject) => ctl.signal.addEventListener('abort', () => reject(ctl.signal.reason), { once: true }));
      const counts = await Promise.race([body, aborted]);
      line = `ok ${sc.name} (${counts})`;
      passed++;
    } catch (e) {
      const reason = ctl.signal.aborted && !(e instanceof StepFailure) ? ctl.signal.reason : e;
      line = `FAIL ${sc.name}: ${reason instanceof StepFailure ? reason.message : `error: ${reason?.stack ?? reason}`}`;
      failed++;
    } finally {
      clearTimeout(timer);
      ctl.abort(new DOMException('the scenario ended', 'AbortError'));
      await db.run(`drop collection ${q}`).catch(() => {});
    }
    log(line);
  }
  log(`scenarios ${file}: ${passed} ok, ${failed} FAIL, ${skipped} skipped`);
  return { passed, failed, skipped };
}
