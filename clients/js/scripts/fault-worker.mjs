// The fault harness's worker (docs/workers.md, "The fault harness"): this SDK's Worker, configured
// from FENEC_* variables, over a handler that does what each job's payload says, printing one JSON
// line per event on stdout. SIGTERM stops it gracefully, SIGINT hard; either way it exits 0.
import { connect } from '@fenecdb/web/client';

function num(name, fallback) {
  const v = process.env[name];
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n < 0) {
    process.stderr.write(`${name} is a whole number from 0 (got ${JSON.stringify(v)})\n`);
    process.exit(2);
  }
  return n;
}

const url = process.env.FENEC_URL;
const queue = process.env.FENEC_QUEUE;
if (!url || !queue) {
  process.stderr.write('FENEC_URL and FENEC_QUEUE are required\n');
  process.exit(2);
}
const name = process.env.FENEC_WORKER || undefined;
const leaseMs = num('FENEC_LEASE_MS', 30000);
const backoffMs = num('FENEC_BACKOFF_MS', 1000);

const print = (line) => process.stdout.write(`${JSON.stringify({ ...line, t: Date.now() })}\n`);

// FENEC_SERVERS (the failover scenario): the client's list, the primary first; named in `ready`.
const servers = process.env.FENEC_SERVERS ? process.env.FENEC_SERVERS.split(',') : undefined;
const db = connect(servers ?? url);
const worker = db.worker(queue, {
  name,
  batch: num('FENEC_BATCH', 10) || 10,
  concurrency: num('FENEC_CONCURRENCY', 1) || 1,
  leaseMs,
  waitMs: num('FENEC_WAIT_MS', 30000),
  heartbeatMs: num('FENEC_HEARTBEAT_MS', Math.max(1, Math.floor(leaseMs / 3))),
  maxAttempts: num('FENEC_MAX_ATTEMPTS', 5) || 5,
  drainTimeoutMs: num('FENEC_DRAIN_MS', 30000),
  timeoutMs: num('FENEC_TIMEOUT_MS', 10000) || 10000,
  backoff: (attempts) => backoffMs * attempts * attempts,
  keepDone: process.env.FENEC_KEEP_DONE === '1',
  onEvent: (e) => print({
    event: e.type,
    worker: e.worker,
    id: e.id ?? null,
    owner: e.owner ?? null,
    attempts: e.attempts ?? null,
    error: e.error ?? null,
    ...(e.count !== undefined ? { count: e.count } : {}),
    ...(e.delayMs !== undefined ? { delay_ms: e.delayMs } : {}),
    ...(e.call !== undefined ? { call: e.call } : {}),
    ...(e.url !== undefined ? { url: e.url } : {}),
  }),
});

/** Sleeps `ms`, or less when `signal` aborts. */
const sleep = (ms, signal) => new Promise((resolve) => {
  if (signal.aborted) return resolve();
  const done = () => { clearTimeout(timer); resolve(); };
  const timer = setTimeout(done, ms);
  signal.addEventListener('abort', done, { once: true });
});

async function handle(job, signal) {
  const p = job.payload !== null && typeof job.payload === 'object' ? job.payload : {};
  if (Number(p.sleep_ms) > 0) await sleep(Number(p.sleep_ms), signal);
  const within = p.fail_times === undefined || p.fail_times === null || job.attempts <= Number(p.fail_times);
  // A thrown value that is not an Error: the worker must fail the job with it all the same.
  if (p.throw === true && within) throw `thrown at attempt ${job.attempts}`;
  if (typeof p.fail === 'string' && within) throw new Error(p.fail);
}

const line = (event, job, extra = {}) => print({
  event, worker: worker.name, id: job.id, owner: job.owner, attempts: job.attempts, error: null, ...extra,
});

process.on('SIGTERM', () => void worker.stop());
process.on('SIGINT', () => void worker.stop({ hard: true }));

print({ event: 'ready', worker: worker.name, id: null, owner: null, attempts: null, error: null, servers: db.servers });
await worker.run(async (job, signal) => {
  let ok = false;
  try {
    await handle(job, signal);
    ok = true;
  } finally {
    line('end', job, { ok });
  }
});
process.exit(0);
