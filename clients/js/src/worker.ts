/**
 * A worker over one queue collection (the seed page's "A worker", as a helper).
 *
 * The queue's life is four statements, written by the builder exactly as clients.md R21 writes them:
 *   claim   set q {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3}
 *             where run_at <= now() order run_at asc limit <batch> returning *     (held with Fenec-Wait)
 *   ack     del q where id = $1 and owner = $2 require 1
 *   extend  set q {run_at: now() + $1} where id = $2 and owner = $3 require 1
 *   fail    set q {owner: $1, error: $2, run_at: case when attempts >= $3 then null
 *             else now() + $4 * attempts * attempts end} where id = $5 and owner = $6 require 1
 *
 * Each claim has an owner token of its own, `<worker name>:<counter>`, so two claims of one job by the
 * same worker are told apart. Ack, extend and fail answer `true` when they wrote the job and `false`
 * when the server refused them with 412: the lease lapsed and the job is another claim's now (stale).
 *
 * `stop()` (or aborting `signal`) gives up a held claim at once, ends the iteration, and hands the
 * claimed jobs it had not yet yielded back to the queue; jobs already yielded stay the caller's to
 * ack or fail. While a yielded job is in hand, the heartbeat extends its lease every third of it.
 */
import { FenecError } from './errors.js';
import type { FenecHttp } from './http.js';
import { raw } from './conditions.js';
import type { Query, Row } from './query.js';
import { expr, inc } from './values.js';

export interface WorkerOptions {
  /** The worker's name, the first half of each owner token. Default: `w-<random>`. */
  name?: string;
  /** Jobs a claim takes at most. Default 10. */
  batch?: number;
  /** How long a claimed job is the worker's, in milliseconds. Default 30 000. */
  leaseMs?: number;
  /** How long a claim is held at the server waiting for a job (`Fenec-Wait`). Default 30 000. */
  waitMs?: number;
  /** `fail` makes a job dead (no ready time) once it has had this many attempts. Default 5. */
  deadAfter?: number;
  /** `fail` puts a job back `backoffMs * attempts²` later. Default 1 000. */
  backoffMs?: number;
  /** Extend the lease of each job in hand every `leaseMs / 3`. Default true. */
  heartbeat?: boolean;
  /** Aborting it stops the worker, as `stop()` does. */
  signal?: AbortSignal;
}

export interface FailOptions {
  deadAfter?: number;
  backoffMs?: number;
}

export class Job {
  /** The row as the claim answered it (`returning *`). */
  readonly row: Row;
  /** The owner token of the claim that took it. */
  readonly owner: string;
  readonly #worker: Worker;
  #heartbeat: ReturnType<typeof setInterval> | undefined;
  #settled = false;

  /** @internal */
  constructor(worker: Worker, row: Row, owner: string) {
    this.#worker = worker;
    this.row = row;
    this.owner = owner;
  }

  get id(): unknown {
    return this.row.id;
  }

  get payload(): unknown {
    return this.row.payload;
  }

  /** Claims of this job so far, this one included. */
  get attempts(): number {
    return Number(this.row.attempts);
  }

  #mine(): Query {
    return this.#worker.queue.where('id', this.row.id).where('owner', this.owner);
  }

  /** Done: deletes the job. False when its lease had lapsed and another claim took it. */
  async ack(): Promise<boolean> {
    this.#stopHeartbeat();
    return stale(this.#mine().delete({ require: 1 }));
  }

  /** Keeps the job `leaseMs` longer (the worker's lease by default). */
  async extend(leaseMs: number = this.#worker.leaseMs): Promise<boolean> {
    const ok = await stale(this.#mine().update({ run_at: expr('now() + ?', leaseMs) }, { require: 1 }));
    if (!ok) this.#stopHeartbeat();
    return ok;
  }

  /** Failed: back to the queue after `backoffMs * attempts²`, or dead after `deadAfter` attempts. */
  async fail(error: string, options: FailOptions = {}): Promise<boolean> {
    this.#stopHeartbeat();
    const deadAfter = options.deadAfter ?? this.#worker.deadAfter;
    const backoff = options.backoffMs ?? this.#worker.backoffMs;
    const runAt = expr('case when attempts >= ? then null else now() + ? * attempts * attempts end', deadAfter, backoff);
    return stale(this.#mine().update({ owner: null, error, run_at: runAt }, { require: 1 }));
  }

  /** @internal Hands an unyielded job back: ready again at once, attempts kept. */
  async release(): Promise<boolean> {
    this.#settled = true;
    return stale(this.#mine().update({ owner: null, run_at: expr('now()') }, { require: 1 }));
  }

  /** @internal */
  startHeartbeat(every: number): void {
    if (this.#settled || this.#heartbeat !== undefined) return;
    this.#heartbeat = setInterval(() => {
      this.extend().catch(() => this.#stopHeartbeat());
    }, every);
    // A heartbeat alone must not keep a process alive.
    (this.#heartbeat as { unref?: () => void }).unref?.();
  }

  #stopHeartbeat(): void {
    this.#settled = true;
    if (this.#heartbeat !== undefined) clearInterval(this.#heartbeat);
    this.#heartbeat = undefined;
  }
}

/** A 412 is a stale operation (`false`); anything else that fails is thrown. */
async function stale(p: Promise<number>): Promise<boolean> {
  try {
    return (await p) === 1;
  } catch (e) {
    if (e instanceof FenecError && e.status === 412) return false;
    throw e;
  }
}

function positive(name: string, v: number | undefined, fallback: number, min = 1): number {
  if (v === undefined) return fallback;
  if (!Number.isSafeInteger(v) || v < min) throw new FenecError(`${name} is a whole number from ${min} (got ${v})`);
  return v;
}

export class Worker implements AsyncIterable<Job> {
  readonly name: string;
  readonly queue: Query;
  readonly batch: number;
  readonly leaseMs: number;
  readonly waitMs: number;
  readonly deadAfter: number;
  readonly backoffMs: number;
  readonly heartbeat: boolean;
  readonly #stopper = new AbortController();
  #claims = 0;

  /** @internal Use `db.worker(collection, options)`. */
  constructor(db: FenecHttp, collection: string, options: WorkerOptions) {
    this.queue = db.from(collection);
    this.name = options.name ?? `w-${Math.random().toString(16).slice(2, 10)}`;
    this.batch = positive('batch', options.batch, 10);
    this.leaseMs = positive('leaseMs', options.leaseMs, 30000);
    this.waitMs = positive('waitMs', options.waitMs, 30000, 0);
    this.deadAfter = positive('deadAfter', options.deadAfter, 5);
    this.backoffMs = positive('backoffMs', options.backoffMs, 1000, 0);
    this.heartbeat = options.heartbeat ?? true;
    const outer = options.signal;
    if (outer?.aborted) this.stop();
    else outer?.addEventListener('abort', () => this.stop(), { once: true });
  }

  /** Whether `stop()` was called (or the signal aborted). */
  get stopped(): boolean {
    return this.#stopper.signal.aborted;
  }

  /** Stops claiming; a held claim is given up at once. */
  stop(): void {
    if (!this.stopped) this.#stopper.abort(new DOMException('the worker was stopped', 'AbortError'));
  }

  /** One claim: up to `batch` ready jobs, held at the server up to `waitMs` while none is ready. */
  async claim(): Promise<Job[]> {
    if (this.stopped) return [];
    const owner = `${this.name}:${++this.#claims}`;
    let rows: Row[];
    try {
      rows = await this.queue
        .where(raw('run_at <= now()'))
        .order('run_at')
        .limit(this.batch)
        .update(
          { owner, run_at: expr('now() + ?', this.leaseMs), attempts: inc(1) },
          { returning: true, wait: this.waitMs, signal: this.#stopper.signal },
        );
    } catch (e) {
      if (this.stopped) return [];
      throw e;
    }
    return rows.map((row) => new Job(this, row, owner));
  }

  /** Claims again and again, yielding each job, until `stop()`. */
  async *[Symbol.asyncIterator](): AsyncGenerator<Job, void, undefined> {
    while (!this.stopped) {
      const jobs = await this.claim();
      for (let i = 0; i < jobs.length; i++) {
        if (this.stopped) {
          await Promise.allSettled(jobs.slice(i).map((j) => j.release()));
          return;
        }
        if (this.heartbeat) jobs[i].startHeartbeat(Math.max(1, Math.floor(this.leaseMs / 3)));
        yield jobs[i];
      }
    }
  }

  /**
   * Runs `work` on every job until `stop()`: acked when it resolves, failed with its error's
   * message when it throws. Up to `batch` jobs of a claim are worked one after another.
   */
  async run(work: (job: Job) => Promise<unknown> | unknown): Promise<void> {
    for await (const job of this) {
      try {
        await work(job);
      } catch (e) {
        await job.fail(e instanceof Error ? e.message : String(e));
        continue;
      }
      await job.ack();
    }
  }
}
