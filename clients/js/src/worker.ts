/**
 * A worker over one queue collection: the seed page's "A worker" loop as a helper, the same
 * surface as every other SDK's (the project's workers page).
 *
 * `run(handler)` loops: one claim, held at the server up to `waitMs` while the queue is empty, takes
 * up to `batch` jobs under a new owner token `<name>:<n>`; the jobs run through the handler, at most
 * `concurrency` at once; each is acked when its handler resolves, and failed with the backoff when
 * it throws (whatever it throws). A job claimed with attempts past `maxAttempts` is dead-lettered
 * without running. Then it claims again, until stopped.
 *
 * - Heartbeat: while a batch is in hand, every `heartbeatMs` each of its unsettled jobs (started or
 *   not) is extended by `leaseMs`. A 412 on it means the lease was lost: the job's signal aborts,
 *   and nothing more is written for it.
 * - The server going away: every request has a timeout (`timeoutMs`; a held claim `waitMs` on top).
 *   A network failure, a timeout or a 5xx makes the call pause (backoff with full jitter, see
 *   retry.ts) and go again; `run` never rejects for it. A claim goes again under the same owner and
 *   Idempotency-Key (`claim:<owner>@<instance>`), so a retry after a lost answer is answered the
 *   jobs the first try took; ack, extend, fail and release have keys of their own
 *   (`ack:<owner>:<id>@<instance>`, ...). The instance is random per Worker object: a process started
 *   again under the same name is not answered the keys (kept a day) of the one before.
 * - `stop()` (or aborting `signal`): a held claim is given up at once (and sent again under its key
 *   with no wait, so that jobs it took just before are given back), the unstarted jobs of the batch
 *   are given back at once, the running ones have `drainTimeoutMs` to finish; then a hard stop.
 * - `stop({ hard: true })` (or aborting `hardSignal`): the handlers' signals abort, every unsettled
 *   job is given back, and `run` returns without waiting for the handlers.
 * - `onEvent` sees what the worker does: claimed, start, done, failed, dead, released, lost, retry,
 *   stopped.
 */
import { FenecError } from './errors.js';
import type { FenecHttp } from './http.js';
import { raw } from './conditions.js';
import { type FailOptions, type JobHost, EXHAUSTED, Job } from './job.js';
import type { Query, Row, Statement } from './query.js';
import { Backoff, describe, pause, transient } from './retry.js';
import { deadline, either } from './signals.js';
import { expr, inc } from './values.js';

export { Job };
export type { FailOptions, JobState } from './job.js';

/** What the worker did, as `onEvent` receives it. */
export interface WorkerEvent {
  type: 'claimed' | 'start' | 'done' | 'failed' | 'dead' | 'released' | 'lost' | 'retry' | 'stopped';
  id?: unknown;
  owner?: string;
  attempts?: number;
  /** A failure's message: the handler's (failed), the server's or the network's (retry, lost). */
  error?: string;
  /** `retry`: the pause before the next try; `failed`: until the job is ready again (milliseconds). */
  delayMs?: number;
  /** `claimed`: how many jobs the claim took. */
  count?: number;
  /** `retry`: the call that failed (claim, ack, extend, fail, dead, release). */
  call?: string;
}

export interface WorkerOptions {
  /** The worker's name, the first half of each owner token. Default: `w-<8 random hex>`. */
  name?: string;
  /** Jobs a claim takes at most. Default 10. */
  batch?: number;
  /** Jobs of a batch run side by side, at most this many (never more than `batch`). Default 1. */
  concurrency?: number;
  /** How long a claimed job is the worker's, in milliseconds; each heartbeat gives this again. Default 30 000. */
  leaseMs?: number;
  /** How long a claim is held at the server while no job is ready (`Fenec-Wait`). Default 30 000. */
  waitMs?: number;
  /** Extend the leases of the jobs in hand while a batch is worked. Default true. */
  heartbeat?: boolean;
  /** How often the heartbeat extends them, in milliseconds. Default `leaseMs / 3`. */
  heartbeatMs?: number;
  /** A job failed with this many attempts is dead (no ready time); one claimed with more is dead-lettered unrun. Default 5. */
  maxAttempts?: number;
  /** The former name of `maxAttempts`. */
  deadAfter?: number;
  /** A failed job is back `backoffMs × attempts²` later. Default 1 000. */
  backoffMs?: number;
  /** Instead of `backoffMs`: the delay, in milliseconds, of a job failed after `attempts` claims. */
  backoff?: (attempts: number) => number;
  /** How long running jobs may still run after a graceful `stop()`, in milliseconds. Default 30 000. */
  drainTimeoutMs?: number;
  /** Bound of each request, in milliseconds; a held claim gets `waitMs` on top. Default 10 000. */
  timeoutMs?: number;
  /** Pause after a failed call: full jitter under a cap from `initialMs` (100) doubling to `maxMs` (5 000). */
  retry?: { initialMs?: number; maxMs?: number };
  /** Ack keeps the job, with no owner, no ready time and `done_at: now()`, instead of deleting it. */
  keepDone?: boolean;
  /** Receives every event; what it throws is ignored. */
  onEvent?: (event: WorkerEvent) => void;
  /** Aborting it stops the worker gracefully, as `stop()` does. */
  signal?: AbortSignal;
}

export interface ClaimOptions {
  /** This claim's `Fenec-Wait`, instead of the worker's `waitMs`. */
  wait?: number;
  /** The claim's Idempotency-Key; `claim:<owner>` by default, so a retry is answered the same jobs. */
  idempotencyKey?: string;
  /** The owner token; by default the next of this worker's. */
  owner?: string;
  signal?: AbortSignal;
}

export interface WorkerRunOptions {
  /** Aborting it stops the worker gracefully, as `stop()` does. */
  signal?: AbortSignal;
  /** Aborting it stops the worker hard, as `stop({ hard: true })` does. */
  hardSignal?: AbortSignal;
}

/** The work of one job: resolve to ack it, throw (anything) to fail it. `signal` is `job.signal`. */
export type JobHandler = (job: Job, signal: AbortSignal) => unknown;

function whole(name: string, v: number | undefined, fallback: number, min: number): number {
  if (v === undefined) return fallback;
  if (!Number.isSafeInteger(v) || v < min) throw new FenecError(`${name} is a whole number from ${min} (got ${v})`);
  return v;
}

const hex = (n: number) => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join('');
const stopReason = () => new DOMException('the worker was stopped', 'AbortError');
const hardReason = () => new DOMException('the worker was stopped hard', 'AbortError');

export class Worker implements AsyncIterable<Job>, JobHost {
  readonly name: string;
  readonly queue: Query;
  readonly batch: number;
  readonly concurrency: number;
  readonly leaseMs: number;
  readonly waitMs: number;
  readonly heartbeat: boolean;
  readonly heartbeatMs: number;
  readonly maxAttempts: number;
  readonly backoffMs: number;
  readonly drainTimeoutMs: number;
  readonly timeoutMs: number;
  readonly keepDone: boolean;
  readonly #backoff: ((attempts: number) => number) | undefined;
  readonly #retry: { initialMs: number; maxMs: number };
  readonly #onEvent: ((event: WorkerEvent) => void) | undefined;
  readonly #db: FenecHttp;
  readonly #stopper = new AbortController();
  readonly #hard = new AbortController();
  readonly #inHand = new Set<Job>();
  #claims = 0;
  // In every key, beside the owner token: a worker started again under the same name counts its
  // owners from 1 again, and must not be answered the keys of the one before (a day, by default).
  readonly #instance = hex(8);
  #running: Promise<void> | undefined;
  #active = false;
  #drain: ReturnType<typeof setTimeout> | undefined;

  /** @internal Use `db.worker(collection, options)`. */
  constructor(db: FenecHttp, collection: string, options: WorkerOptions) {
    this.#db = db;
    this.queue = db.from(collection);
    this.name = options.name ?? `w-${hex(8)}`;
    this.batch = whole('batch', options.batch, 10, 1);
    this.concurrency = Math.min(this.batch, whole('concurrency', options.concurrency, 1, 1));
    this.leaseMs = whole('leaseMs', options.leaseMs, 30000, 1);
    this.waitMs = whole('waitMs', options.waitMs, 30000, 0);
    this.heartbeat = options.heartbeat ?? true;
    this.heartbeatMs = whole('heartbeatMs', options.heartbeatMs, Math.max(1, Math.floor(this.leaseMs / 3)), 1);
    this.maxAttempts = whole('maxAttempts', options.maxAttempts ?? options.deadAfter, 5, 1);
    this.backoffMs = whole('backoffMs', options.backoffMs, 1000, 0);
    this.drainTimeoutMs = whole('drainTimeoutMs', options.drainTimeoutMs, 30000, 0);
    this.timeoutMs = whole('timeoutMs', options.timeoutMs, 10000, 1);
    this.keepDone = options.keepDone ?? false;
    if (options.backoff !== undefined && typeof options.backoff !== 'function') {
      throw new FenecError('backoff is a function of the attempts, answering milliseconds');
    }
    this.#backoff = options.backoff;
    this.#retry = {
      initialMs: whole('retry.initialMs', options.retry?.initialMs, 100, 1),
      maxMs: whole('retry.maxMs', options.retry?.maxMs, 5000, 1),
    };
    this.#onEvent = options.onEvent;
    const outer = options.signal;
    if (outer?.aborted) void this.stop();
    else outer?.addEventListener('abort', () => void this.stop(), { once: true });
  }

  /** The former name of `maxAttempts`. */
  get deadAfter(): number {
    return this.maxAttempts;
  }

  /** Whether `stop()` was called (or the signal aborted). */
  get stopped(): boolean {
    return this.#stopper.signal.aborted;
  }

  /**
   * Stops the worker: no claim after this one, and a held claim is given up at once. Under `run`,
   * the unstarted jobs are given back at once and the running ones have `drainTimeoutMs` to finish;
   * `{ hard: true }` aborts their signals and gives them back now. Resolves once `run` has returned
   * (at once when it is not running) — so a handler must not wait for it.
   */
  stop(options: { hard?: boolean } = {}): Promise<void> {
    if (!this.stopped) {
      this.#stopper.abort(stopReason());
      if (this.#active && !options.hard) {
        this.#drain = setTimeout(() => void this.stop({ hard: true }), this.drainTimeoutMs);
      }
    }
    if (options.hard && !this.#hard.signal.aborted) {
      this.#hard.abort(hardReason());
      for (const job of this.#inHand) job.cancel(hardReason());
    }
    return this.#running ?? Promise.resolve();
  }

  /** The next owner token: `<name>:<counter>`. */
  nextOwner(): string {
    return `${this.name}:${++this.#claims}`;
  }

  #claimChain(db: FenecHttp = this.#db): Query {
    return db.from(this.queue.collection).where(raw('run_at <= now()')).order('run_at').limit(this.batch);
  }

  #claimPatch(owner: string) {
    return { owner, run_at: expr('now() + ?', this.leaseMs), attempts: inc(1) };
  }

  /** The claim's text and parameters for `owner`; runs nothing. */
  toClaim(owner: string): Statement {
    return this.#claimChain().toUpdate(this.#claimPatch(owner), { returning: true });
  }

  /**
   * One claim: the oldest ready jobs, up to `batch`, leased to a new owner token, held at the
   * server up to `waitMs` while none is ready, bounded by `waitMs + timeoutMs`. A stopped worker's
   * claim answers no job. Sent once: a failure rejects (`run` and the iteration send it again).
   */
  async claim(options: ClaimOptions = {}): Promise<Job[]> {
    if (this.stopped) return [];
    const owner = options.owner ?? this.nextOwner();
    const db = this.#db.withIdempotencyKey(options.idempotencyKey ?? `claim:${owner}@${this.#instance}`);
    const wait = options.wait ?? this.waitMs;
    const joined = options.signal === undefined ? undefined : either(options.signal, this.#stopper.signal);
    const bounded = deadline(joined?.signal ?? this.#stopper.signal, wait + this.timeoutMs);
    let rows: Row[];
    try {
      rows = await this.#claimChain(db).update(this.#claimPatch(owner), { returning: true, wait, signal: bounded.signal });
    } catch (e) {
      if (this.stopped) return this.#giveBackClaim(db, owner);
      throw e;
    } finally {
      bounded.release();
      joined?.release();
    }
    return rows.map((row) => new Job(this, row, owner));
  }

  /**
   * A claim given up by `stop()` may have taken jobs at the server just before its answer was
   * dropped. Sent again under its key with no wait, it is answered those jobs (or takes what is
   * ready now), and they are given back at once rather than left leased to nobody until their
   * lease ends. One try, bounded by `timeoutMs`; answers no job.
   */
  async #giveBackClaim(db: FenecHttp, owner: string): Promise<Job[]> {
    const bounded = deadline(undefined, this.timeoutMs);
    try {
      const rows = await this.#claimChain(db).update(this.#claimPatch(owner), { returning: true, wait: 0, signal: bounded.signal });
      await Promise.all(rows.map((row) => this.#giveBack(new Job(this, row, owner))));
    } catch {
      // the server is away: its jobs come back when their lease ends
    } finally {
      bounded.release();
    }
    return [];
  }

  /** The next batch: claims until one goes through, pausing after each failure; `[]` once stopped. */
  async #claimNext(): Promise<Job[]> {
    const backoff = new Backoff(this.#retry.initialMs, this.#retry.maxMs);
    let owner = this.nextOwner();
    while (!this.stopped) {
      try {
        const jobs = await this.claim({ owner });
        if (jobs.length > 0) this.#emit({ type: 'claimed', owner, count: jobs.length });
        return jobs;
      } catch (e) {
        const delayMs = backoff.next();
        this.#emit({ type: 'retry', call: 'claim', owner, error: describe(e), delayMs });
        await pause(delayMs, this.#stopper.signal);
        // A refusal (a 4xx) is not answered again under its key: the next try is a new claim.
        if (!transient(e)) owner = this.nextOwner();
      }
    }
    return [];
  }

  /** @internal */
  hookDelay(attempts: number): number | undefined {
    if (this.#backoff === undefined) return undefined;
    const d = Number(this.#backoff(attempts));
    return Number.isFinite(d) && d > 0 ? Math.round(d) : 0;
  }

  /**
   * @internal Sends one write of `job` under `key`, again after each network failure, timeout or
   * 5xx, until it goes through or the worker is stopped hard. A release once stopped hard is sent
   * once. Answers the count, or false on a 412 (the job is then lost).
   */
  async send(job: Job, kind: string, stmt: Statement, suffix = ''): Promise<number | false> {
    const key = `${kind}:${job.owner}:${String(job.id)}${suffix}@${this.#instance}`;
    const once = this.#hard.signal.aborted;
    const until = once ? new AbortController().signal : this.#hard.signal;
    // A give-back on its way is not cut by a hard stop (that stop gives jobs back itself): it is
    // only not sent again after one.
    const bound = kind === 'release' ? new AbortController().signal : until;
    const backoff = new Backoff(this.#retry.initialMs, this.#retry.maxMs);
    const keyed = this.#db.withIdempotencyKey(key);
    for (;;) {
      const bounded = deadline(bound, this.timeoutMs);
      try {
        const answer = await keyed.run(stmt[0], stmt[1], { signal: bounded.signal });
        const n = answer.kind === 'affected' ? answer.count : 0;
        if (kind === 'release' && n === 0) this.#lose(job, 'released');
        return n;
      } catch (e) {
        if (e instanceof FenecError && e.status === 412) {
          // An extend that crossed this job's ack or fail on the way is no news.
          if (kind !== 'extend' || !job.settled) this.#lose(job, kind);
          return false;
        }
        if (once || until.aborted || !transient(e)) throw e;
        const delayMs = backoff.next();
        this.#emit({ type: 'retry', call: kind, id: job.id, owner: job.owner, error: describe(e), delayMs });
        await pause(delayMs, until);
        if (until.aborted) throw until.reason;
      } finally {
        bounded.release();
      }
    }
  }

  #lose(job: Job, during: string): void {
    if (job.lost) return;
    job.markLost();
    this.#emit({ type: 'lost', id: job.id, owner: job.owner, attempts: job.attempts, error: `lease lost (${during})` });
  }

  #emit(event: WorkerEvent): void {
    try {
      this.#onEvent?.(event);
    } catch {
      // an event hook's failure is its own: the worker goes on
    }
  }

  /** Extends every unsettled job in hand every `heartbeatMs`, one extend in flight per job. */
  #beat(jobs: readonly Job[]): () => void {
    if (!this.heartbeat) return () => {};
    const inFlight = new Set<Job>();
    const timer = setInterval(() => {
      for (const job of jobs) {
        if (job.settled || inFlight.has(job)) continue;
        inFlight.add(job);
        job.extend().catch(() => {}).finally(() => inFlight.delete(job));
      }
    }, this.heartbeatMs);
    // A heartbeat alone must not keep a process alive (an iteration left unfinished).
    (timer as { unref?: () => void }).unref?.();
    return () => clearInterval(timer);
  }

  /** Claims again and again, yielding each job of each batch, until `stop()`. */
  async *[Symbol.asyncIterator](): AsyncGenerator<Job, void, undefined> {
    while (!this.stopped) {
      const jobs = await this.#claimNext();
      if (jobs.length === 0) continue;
      const stopBeat = this.#beat(jobs);
      jobs.forEach((j) => this.#inHand.add(j));
      try {
        for (const job of jobs) {
          if (this.stopped) break;
          if (job.settled) continue;
          if (job.attempts > this.maxAttempts) {
            await this.#settle(job, () => job.deadLetter(), 'dead', EXHAUSTED);
            continue;
          }
          job.state = 'running';
          yield job;
        }
      } finally {
        await Promise.all(jobs.filter((j) => j.state === 'waiting').map((j) => this.#giveBack(j)));
        stopBeat();
        jobs.forEach((j) => this.#inHand.delete(j));
      }
    }
  }

  /**
   * Runs `handler` on every job until stopped: acked when it resolves, failed with the backoff when
   * it throws. Never rejects for the server, the network or the handler; resolves once stopped.
   */
  async run(handler: JobHandler, options: WorkerRunOptions = {}): Promise<void> {
    if (typeof handler !== 'function') throw new FenecError('run() takes the job handler: (job, signal) => ...');
    if (this.#running !== undefined) throw new FenecError('this worker is running already');
    const links: (() => void)[] = [];
    const link = (signal: AbortSignal | undefined, act: () => void) => {
      if (signal === undefined) return;
      if (signal.aborted) act();
      signal.addEventListener('abort', act, { once: true });
      links.push(() => signal.removeEventListener('abort', act));
    };
    let finished!: () => void;
    this.#running = new Promise((resolve) => (finished = resolve));
    this.#active = true;
    link(options.signal, () => void this.stop());
    link(options.hardSignal, () => void this.stop({ hard: true }));
    try {
      while (!this.stopped) {
        const jobs = await this.#claimNext();
        if (jobs.length > 0) await this.#work(jobs, handler);
      }
    } finally {
      for (const unlink of links) unlink();
      this.#active = false;
      clearTimeout(this.#drain);
      this.#emit({ type: 'stopped' });
      finished();
    }
  }

  /** One batch: dead letters, then the handlers, `concurrency` at a time; given back on stop. */
  async #work(jobs: Job[], handler: JobHandler): Promise<void> {
    jobs.forEach((j) => this.#inHand.add(j));
    const stopBeat = this.#beat(jobs);
    const writes: Promise<void>[] = [];
    const queue: Job[] = [];
    for (const job of jobs) {
      if (job.attempts > this.maxAttempts) writes.push(this.#settle(job, () => job.deadLetter(), 'dead', EXHAUSTED));
      else queue.push(job);
    }
    const giveBackRest = () => {
      for (const job of queue.splice(0)) writes.push(this.#giveBack(job));
    };
    if (this.stopped) giveBackRest();
    this.#stopper.signal.addEventListener('abort', giveBackRest, { once: true });
    const runner = async () => {
      for (let job = queue.shift(); job !== undefined; job = queue.shift()) await this.#runOne(job, handler);
    };
    const hard = new Promise<void>((resolve) => {
      if (this.#hard.signal.aborted) resolve();
      this.#hard.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    try {
      await Promise.race([Promise.all(Array.from({ length: Math.min(this.concurrency, queue.length) }, runner)), hard]);
      while (writes.length > 0 && !this.#hard.signal.aborted) await Promise.race([writes.shift(), hard]);
      if (this.#hard.signal.aborted) {
        await Promise.all([...writes, ...jobs.filter((j) => !j.settled).map((j) => this.#giveBack(j))]);
      }
    } finally {
      this.#stopper.signal.removeEventListener('abort', giveBackRest);
      stopBeat();
      jobs.forEach((j) => this.#inHand.delete(j));
    }
  }

  async #runOne(job: Job, handler: JobHandler): Promise<void> {
    if (job.settled) return; // lost while it waited
    job.state = 'running';
    this.#emit({ type: 'start', id: job.id, owner: job.owner, attempts: job.attempts });
    let threw = false;
    let error: unknown;
    try {
      await handler(job, job.signal);
    } catch (e) {
      threw = true;
      error = e;
    }
    if (job.settled) return; // lost, or given back by a hard stop, while it ran
    if (!threw) await this.#settle(job, () => job.ack(), 'done');
    else await this.#settle(job, () => job.fail(describe(error)), 'failed', describe(error));
  }

  /**
   * One settling write and its event: `done`; `failed` with the backoff's delay, or `dead` when that
   * was the last attempt; `dead`. A failure that is not the server's 412 is told as `lost`.
   */
  async #settle(job: Job, write: () => Promise<boolean>, type: 'done' | 'failed' | 'dead', error?: string): Promise<void> {
    try {
      if (!(await write())) return;
      const base = { id: job.id, owner: job.owner, attempts: job.attempts };
      if (type === 'done') this.#emit({ type, ...base });
      else if (type === 'dead' || job.attempts >= this.maxAttempts) this.#emit({ type: 'dead', ...base, error: error ?? EXHAUSTED });
      else {
        const delayMs = this.hookDelay(job.attempts) ?? this.backoffMs * job.attempts * job.attempts;
        this.#emit({ type, ...base, error: error ?? '', delayMs });
      }
    } catch (e) {
      // Refused (a 4xx but 412), or stopped hard mid-retry: the job is left to its lease.
      if (!this.#hard.signal.aborted) this.#lose(job, describe(e));
    }
  }

  async #giveBack(job: Job): Promise<void> {
    if (job.settled) return;
    try {
      if (await job.release()) this.#emit({ type: 'released', id: job.id, owner: job.owner, attempts: job.attempts });
    } catch {
      // refused, or not through before a hard stop: its lease lapses and the next claim takes it
    }
  }
}
