/**
 * A worker over one queue collection: the same worker as every other SDK's, held to the contract in
 * the repository's `conformance/worker-contract.json` (docs/workers.md is its prose;
 * test/worker-contract.test.mjs checks this file's surface against it).
 *
 * `run(handler)` loops: one claim, held at the server up to `waitMs` while the queue is empty, takes
 * up to `batch` jobs under a new owner token `<name>:<n>`; the jobs run through the handler, at most
 * `concurrency` at once; each is acked when its handler resolves, and failed with `backoff(attempts)`
 * when it throws (whatever it throws). A job claimed with attempts past `maxAttempts` is made a dead
 * letter without running. Once the batch is settled it claims again, until stopped.
 *
 * - Slots: a handler's slot is free again only once its job is settled (the ack or fail answered, the
 *   job lost or given back), so an outage re-runs at most `concurrency` jobs.
 * - Heartbeat: while a batch is in hand, every `heartbeatMs` (0: never) each of its unsettled jobs,
 *   started or not, is extended by `leaseMs`. A 412 means the lease was lost: a `lost` event, the
 *   job's signal aborts, and nothing more is written for it.
 * - Retries: every request has a timeout (`timeoutMs`; a held claim `waitMs` on top). A network
 *   failure, a timeout or a 5xx makes the call pause (full jitter under a cap doubling from
 *   `retryMinMs` to `retryMaxMs`, see retry.ts) and go again under the same Idempotency-Key
 *   (`claim:<owner>@<instance>`, `ack:<owner>:<id>@<instance>`, ...); the instance is random per
 *   Worker object, so a process started again under the same name is not answered the keys (kept a
 *   day) of the one before.
 * - What ends run: any other answer (400, 401, 403, 404, 409, 422, ...) to any call. The worker stops
 *   as `stop()` does, and `run` then rejects with that FenecError: a queue name with a typo or a token
 *   the policy refuses cannot be mended by sending again.
 * - `stop()`: a held claim is given up at once (and sent again under its key with no wait, so that
 *   jobs it took just before are given back), the unstarted jobs are given back at once, the running
 *   ones have until the drain deadline (`drainTimeoutMs` after the stop) to finish and be settled;
 *   every call of the stop is retried only until that deadline.
 * - At the drain deadline, or at once on `stop({ hard: true })`: the running handlers' signals abort,
 *   every job still in hand is given back with one try, and calls still on their way have a grace of
 *   1 s (GRACE_MS). So `run` returns within `drainTimeoutMs` + 1 s of a stop, and within 1 s of a
 *   hard stop, whether the server answers or not; what could not be given back comes back when its
 *   lease runs out.
 * - `onEvent` sees what the worker does: claimed, start, done, failed, dead, released, lost, retry,
 *   stopped, and `primary` (with `url`) when its client's primary changed (a replica named it, or the
 *   one before could not be reached: docs/clients.md, "Replicas and failover"); every event names
 *   the worker. Claims, acks, extends and fails always go to the client's primary.
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

/** After the drain deadline or a hard stop, how long the give-backs and the calls on their way may take. */
const GRACE_MS = 1000;

/** What the worker did, as `onEvent` receives it; a field that does not apply is undefined. */
export interface WorkerEvent {
  type: 'claimed' | 'start' | 'done' | 'failed' | 'dead' | 'released' | 'lost' | 'retry' | 'stopped' | 'primary';
  /** The worker's name. */
  worker: string;
  /** The job's id. */
  id?: unknown;
  /** The owner token of the claim. */
  owner?: string;
  /** The job's attempts, this claim's included. */
  attempts?: number;
  /** `claimed`: how many jobs the claim took. */
  count?: number;
  /** A failure's text: the handler's (failed, dead), the network's or the server's (retry). */
  error?: string;
  /** `retry`: the pause before the next try; `failed`: until the job is ready again (milliseconds). */
  delayMs?: number;
  /** `retry`, `lost`: the call (claim, ack, extend, fail, dead, release). */
  call?: string;
  /** `primary`: the server the client sends writes and claims to now. */
  url?: string;
}

export interface WorkerOptions {
  /** The worker's name; each claim's owner token is `<name>:<n>`. Default: `w-<8 random hex>`. */
  name?: string;
  /** Jobs one claim takes at most. Default 10. */
  batch?: number;
  /** Jobs of a batch that run at the same time (never more than `batch`). Default 1. */
  concurrency?: number;
  /** How long a claimed job is the worker's, in milliseconds; each heartbeat gives this again. Default 30 000. */
  leaseMs?: number;
  /** How long a claim is held at the server while no job is ready (`Fenec-Wait`), in milliseconds. Default 30 000. */
  waitMs?: number;
  /** How often every job in hand has its lease extended, in milliseconds; 0: never. Default `leaseMs / 3`. */
  heartbeatMs?: number;
  /** A job that fails at this many attempts is a dead letter; one claimed with more is made one unrun. Default 5. */
  maxAttempts?: number;
  /** How long a job failed at `attempts` waits before it is ready again, in milliseconds. Default `attempts² × 1000`. */
  backoff?: (attempts: number) => number;
  /** On a graceful stop, how long running jobs may still run, in milliseconds. Default 30 000. */
  drainTimeoutMs?: number;
  /** How long one call may take, in milliseconds; a held claim gets `waitMs` on top. Default 10 000. */
  timeoutMs?: number;
  /** The ceiling of the first retry pause, in milliseconds; it doubles at each failure in a row. Default 100. */
  retryMinMs?: number;
  /** The most the retry pause's ceiling doubles to, in milliseconds. Default 5 000. */
  retryMaxMs?: number;
  /** An ack keeps the job, `{owner: null, run_at: null, done_at: now()}`, instead of deleting it. Default false. */
  keepDone?: boolean;
  /** Receives every event; what it throws is logged and ignored. */
  onEvent?: (event: WorkerEvent) => void;
  /** @deprecated The former name of `maxAttempts`. */
  deadAfter?: number;
  /** @deprecated Aborting it stops the worker gracefully, as `stop()` does (give it to `run` instead). */
  signal?: AbortSignal;
}

/** Options of the contract's older shapes, refused by name so that they are not silently ignored. */
const REMOVED: Record<string, string> = {
  retry: 'retry: {initialMs, maxMs} is now retryMinMs and retryMaxMs',
  heartbeat: 'heartbeat (a boolean) is now heartbeatMs: 0 for no heartbeat',
  backoffMs: 'backoffMs is now backoff, a function of the attempts answering milliseconds',
};

export interface EnqueueOptions {
  /** Ready this many milliseconds from now. Default 0: at once. */
  delayMs?: number;
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
const cutReason = () => new DOMException('the worker was stopped hard, or its drain timeout ran out', 'AbortError');
const graceReason = () => new DOMException(`the worker stopped: no call outlives its ${GRACE_MS} ms grace`, 'AbortError');
const defaultBackoff = (attempts: number) => 1000 * attempts * attempts;

/** Whether `e` is a refusal that ends run: not the network, a timeout, a 5xx, a 412 or an abort. */
function ends(e: unknown): boolean {
  if (transient(e)) return false;
  if (e instanceof FenecError) return e.status !== 412;
  return !(e instanceof DOMException && e.name === 'AbortError');
}

export class Worker implements AsyncIterable<Job>, JobHost {
  readonly name: string;
  readonly queue: Query;
  readonly batch: number;
  readonly concurrency: number;
  readonly leaseMs: number;
  readonly waitMs: number;
  /** 0: no heartbeat. */
  readonly heartbeatMs: number;
  readonly maxAttempts: number;
  readonly drainTimeoutMs: number;
  readonly timeoutMs: number;
  readonly retryMinMs: number;
  readonly retryMaxMs: number;
  readonly keepDone: boolean;
  readonly #backoff: (attempts: number) => number;
  readonly #onEvent: ((event: WorkerEvent) => void) | undefined;
  readonly #db: FenecHttp;
  /** Aborted by a stop: no claim after it. */
  readonly #stopper = new AbortController();
  /** Aborted at the drain deadline or a hard stop: handlers cancelled, nothing retried. */
  readonly #cut = new AbortController();
  /** Aborted GRACE_MS after the cut: every request still on its way is given up. */
  readonly #grace = new AbortController();
  readonly #inHand = new Set<Job>();
  #claims = 0;
  // In every key, beside the owner token: a worker started again under the same name counts its
  // owners from 1 again, and must not be answered the keys of the one before (a day, by default).
  readonly #instance = hex(8);
  #running: Promise<void> | undefined;
  #active = false;
  #fatal: { error: unknown } | undefined;
  #timers: ReturnType<typeof setTimeout>[] = [];
  /** The client's primary last seen: a change is a `primary` event. */
  #primary: string;

  /** @internal Use `db.worker(queue, options)`. */
  constructor(db: FenecHttp, queue: string, options: WorkerOptions) {
    for (const key of Object.keys(options)) {
      if (key in REMOVED) throw new FenecError(`the worker option ${REMOVED[key]}`);
    }
    this.#db = db;
    this.#primary = db.url;
    this.queue = db.from(queue);
    this.name = options.name ?? `w-${hex(8)}`;
    this.batch = whole('batch', options.batch, 10, 1);
    this.concurrency = Math.min(this.batch, whole('concurrency', options.concurrency, 1, 1));
    this.leaseMs = whole('leaseMs', options.leaseMs, 30000, 1);
    this.waitMs = whole('waitMs', options.waitMs, 30000, 0);
    this.heartbeatMs = whole('heartbeatMs', options.heartbeatMs, Math.max(1, Math.floor(this.leaseMs / 3)), 0);
    this.maxAttempts = whole('maxAttempts', options.maxAttempts ?? options.deadAfter, 5, 1);
    this.drainTimeoutMs = whole('drainTimeoutMs', options.drainTimeoutMs, 30000, 0);
    this.timeoutMs = whole('timeoutMs', options.timeoutMs, 10000, 1);
    this.retryMinMs = whole('retryMinMs', options.retryMinMs, 100, 1);
    this.retryMaxMs = whole('retryMaxMs', options.retryMaxMs, Math.max(5000, this.retryMinMs), this.retryMinMs);
    this.keepDone = options.keepDone ?? false;
    if (options.backoff !== undefined && typeof options.backoff !== 'function') {
      throw new FenecError('backoff is a function of the attempts, answering milliseconds');
    }
    this.#backoff = options.backoff ?? defaultBackoff;
    this.#onEvent = options.onEvent;
    const outer = options.signal;
    if (outer?.aborted) void this.stop();
    else outer?.addEventListener('abort', () => void this.stop(), { once: true });
  }

  /** @deprecated The former name of `maxAttempts`. */
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
   * (at once when it is not running), so a handler must not wait for it.
   */
  stop(options: { hard?: boolean } = {}): Promise<void> {
    if (!this.stopped) {
      this.#stopper.abort(stopReason());
      if (this.#active && !options.hard) this.#later(() => this.#cutOff(), this.drainTimeoutMs);
    }
    if (options.hard) this.#cutOff();
    return this.#running ?? Promise.resolve();
  }

  /** The drain deadline, or a hard stop: cancel the handlers, stop retrying, start the grace. */
  #cutOff(): void {
    if (this.#cut.signal.aborted) return;
    if (!this.stopped) this.#stopper.abort(stopReason());
    this.#cut.abort(cutReason());
    for (const job of this.#inHand) job.cancel(cutReason());
    this.#later(() => this.#grace.abort(graceReason()), GRACE_MS);
  }

  #later(act: () => void, ms: number): void {
    const timer = setTimeout(act, ms);
    // A stop's timers must not keep a process alive once run has returned.
    (timer as { unref?: () => void }).unref?.();
    this.#timers.push(timer);
  }

  /** A refusal that ends run: kept (the first), and the worker stopped gracefully. */
  #end(e: unknown): void {
    if (this.#fatal === undefined) this.#fatal = { error: e };
    void this.stop();
  }

  /** What a failed call of a job means, once it was not retried: the cut's doing, or a refusal. */
  #failed(e: unknown): void {
    if (this.#cut.signal.aborted) return;
    if (ends(e)) this.#end(e);
  }

  /** The next owner token: `<name>:<counter>`. */
  nextOwner(): string {
    return `${this.name}:${++this.#claims}`;
  }

  /**
   * Puts one job into the queue, ready after `delayMs` (0: at once):
   * `put <queue> {payload: $1, run_at: now() + $2, attempts: $3}` with `[payload, delayMs, 0]`.
   * Resolves to the count the server answered (1); a `put` answers no id. Sent once: a failure
   * rejects (sent again, it could enqueue the job twice).
   */
  async enqueue(payload: unknown, options: EnqueueOptions = {}): Promise<number> {
    const delayMs = whole('delayMs', options.delayMs, 0, 0);
    const [text, params] = this.toEnqueue(payload, delayMs);
    const answer = await this.#db.run(text, params);
    return answer.kind === 'affected' ? answer.count : 0;
  }

  /** The enqueue's text and parameters; runs nothing. */
  toEnqueue(payload: unknown, delayMs = 0): Statement {
    return this.queue.toInsert({ payload: payload as never, run_at: expr('now() + ?', delayMs), attempts: 0 });
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
      this.#seenPrimary();
    }
    return rows.map((row) => new Job(this, row, owner));
  }

  /**
   * A claim given up by `stop()` may have taken jobs at the server just before its answer was
   * dropped. Sent again under its key with no wait, it is answered those jobs (or takes what is
   * ready now), and they are given back at once rather than left leased to nobody until their
   * lease ends. One try, bounded by `timeoutMs` and the grace; answers no job.
   */
  async #giveBackClaim(db: FenecHttp, owner: string): Promise<Job[]> {
    const bounded = deadline(this.#grace.signal, this.timeoutMs);
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

  /**
   * The next batch: claims until one goes through, pausing after each failure on the network, by a
   * timeout or with a 5xx; `[]` once stopped, or after a refusal (which ends run).
   */
  async #claimNext(): Promise<Job[]> {
    const backoff = new Backoff(this.retryMinMs, this.retryMaxMs);
    const owner = this.nextOwner();
    while (!this.stopped) {
      try {
        const jobs = await this.claim({ owner });
        if (jobs.length > 0) this.#emit({ type: 'claimed', owner, count: jobs.length });
        return jobs;
      } catch (e) {
        if (this.stopped) break;
        if (!transient(e)) {
          this.#end(e);
          break;
        }
        const delayMs = backoff.next();
        this.#emit({ type: 'retry', call: 'claim', error: describe(e), delayMs });
        await pause(delayMs, this.#stopper.signal);
      }
    }
    return [];
  }

  /** @internal The backoff of a job failed at `attempts`, in whole milliseconds. */
  delayFor(attempts: number): number {
    const d = Number(this.#backoff(attempts));
    return Number.isFinite(d) && d > 0 ? Math.round(d) : 0;
  }

  /**
   * @internal Sends one write of `job` under `key`, again after each network failure, timeout or
   * 5xx, until it goes through or the cut (the drain deadline or a hard stop); after the cut, once,
   * within the grace. Answers the count, or false on a 412 (the job is then lost; a release that
   * wrote nothing is no news). Any other refusal rejects.
   */
  async send(job: Job, kind: string, stmt: Statement, suffix = ''): Promise<number | false> {
    const key = `${kind}:${job.owner}:${String(job.id)}${suffix}@${this.#instance}`;
    const backoff = new Backoff(this.retryMinMs, this.retryMaxMs);
    const keyed = this.#db.withIdempotencyKey(key);
    for (;;) {
      const bounded = deadline(this.#grace.signal, this.timeoutMs);
      try {
        const answer = await keyed.run(stmt[0], stmt[1], { signal: bounded.signal });
        return answer.kind === 'affected' ? answer.count : 0;
      } catch (e) {
        if (e instanceof FenecError && e.status === 412) {
          // An extend that crossed this job's ack or fail on the way is no news.
          if (kind !== 'release' && (kind !== 'extend' || !job.settled)) this.#lose(job, kind);
          return false;
        }
        if (this.#cut.signal.aborted || !transient(e)) throw e;
        const delayMs = backoff.next();
        this.#emit({ type: 'retry', call: kind, id: job.id, owner: job.owner, attempts: job.attempts, error: describe(e), delayMs });
        await pause(delayMs, this.#cut.signal);
        if (this.#cut.signal.aborted) throw e;
      } finally {
        bounded.release();
        this.#seenPrimary();
      }
    }
  }

  /** A `primary` event when the client's primary is not the one last seen. */
  #seenPrimary(): void {
    const url = this.#db.url;
    if (url === this.#primary) return;
    this.#primary = url;
    this.#emit({ type: 'primary', url });
  }

  #lose(job: Job, call: string): void {
    if (job.lost) return;
    job.markLost();
    this.#emit({ type: 'lost', id: job.id, owner: job.owner, attempts: job.attempts, call });
  }

  #emit(event: Omit<WorkerEvent, 'worker'>): void {
    try {
      this.#onEvent?.({ ...event, worker: this.name } as WorkerEvent);
    } catch (e) {
      console.error(`fenecdb worker ${this.name}: onEvent threw on ${event.type}: ${describe(e)}`);
    }
  }

  /** Extends every unsettled job in hand every `heartbeatMs`, one extend in flight per job. */
  #beat(jobs: readonly Job[]): () => void {
    if (this.heartbeatMs === 0) return () => {};
    const inFlight = new Set<Job>();
    const timer = setInterval(() => {
      for (const job of jobs) {
        if (job.settled || inFlight.has(job)) continue;
        inFlight.add(job);
        job.extend().catch((e) => this.#failed(e)).finally(() => inFlight.delete(job));
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
    if (this.#fatal !== undefined) throw this.#fatal.error;
  }

  /**
   * Runs `handler` on every job until stopped: acked when it resolves, failed with the backoff when
   * it throws. Resolves once stopped; rejects, after stopping as `stop()` does, with a refusal of
   * the server that is not a 5xx or a 412 (a queue that does not exist, a token refused).
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
      for (const timer of this.#timers) clearTimeout(timer);
      this.#emit({ type: 'stopped' });
      finished();
    }
    if (this.#fatal !== undefined) throw this.#fatal.error;
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
    // Every listener added here is taken off in `finally`: a worker runs many batches on one signal.
    let onCut!: () => void;
    const cut = new Promise<void>((resolve) => (onCut = resolve));
    if (this.stopped) giveBackRest();
    else this.#stopper.signal.addEventListener('abort', giveBackRest, { once: true });
    if (this.#cut.signal.aborted) onCut();
    else this.#cut.signal.addEventListener('abort', onCut, { once: true });
    const runner = async () => {
      for (let job = queue.shift(); job !== undefined; job = queue.shift()) await this.#runOne(job, handler);
    };
    try {
      await Promise.race([Promise.all(Array.from({ length: Math.min(this.concurrency, queue.length) }, runner)), cut]);
      while (writes.length > 0 && !this.#cut.signal.aborted) await Promise.race([writes.shift(), cut]);
      if (this.#cut.signal.aborted) {
        // The handlers that still run were cancelled by the cut: what is in hand goes back, one try
        // each, and the writes on their way end within the grace.
        await Promise.all([...writes, ...jobs.filter((j) => !j.settled).map((j) => this.#giveBack(j))]);
      }
    } finally {
      this.#stopper.signal.removeEventListener('abort', giveBackRest);
      this.#cut.signal.removeEventListener('abort', onCut);
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
    if (job.settled || this.#cut.signal.aborted) return; // lost, or cancelled by the cut, while it ran
    if (!threw) await this.#settle(job, () => job.ack(), 'done');
    else await this.#settle(job, () => job.fail(describe(error)), 'failed', describe(error));
  }

  /**
   * One settling write and its event: `done`; `failed` with the backoff's delay, or `dead` when that
   * was the last attempt; `dead`. A 412 was told as `lost` by `send`; a refusal ends run.
   */
  async #settle(job: Job, write: () => Promise<boolean>, type: 'done' | 'failed' | 'dead', error?: string): Promise<void> {
    try {
      if (!(await write())) return;
      const base = { id: job.id, owner: job.owner, attempts: job.attempts };
      if (type === 'done') this.#emit({ type, ...base });
      else if (type === 'dead' || job.attempts >= this.maxAttempts) this.#emit({ type: 'dead', ...base, error: error ?? EXHAUSTED });
      else this.#emit({ type, ...base, error: error ?? '', delayMs: this.delayFor(job.attempts) });
    } catch (e) {
      // Not through by the cut (the job is left to its lease), or refused: run ends.
      this.#failed(e);
    }
  }

  /** Gives a job in hand back, ready at once, its attempt taken off; `released` when it went through. */
  async #giveBack(job: Job): Promise<void> {
    if (job.settled) return;
    try {
      if (await job.release()) this.#emit({ type: 'released', id: job.id, owner: job.owner, attempts: job.attempts });
    } catch (e) {
      // not through before the grace ran out: its lease lapses and the next claim takes it
      this.#failed(e);
    }
  }
}
