/**
 * A worker over one queue collection: the seed page's "A worker" loop as a helper, the same as the
 * Python client's `Worker`.
 *
 * Every step is one statement, written by the builder as clients.md R21 writes it, and visible as
 * text through the `to*` methods:
 *   claim   set q {owner: $1, run_at: now() + $2, attempts: coalesce(attempts, 0) + $3}
 *             where run_at <= now() order run_at asc limit <batch> returning *     (held: Fenec-Wait)
 *   ack     del q where id = $1 and owner = $2 require 1
 *   extend  set q {run_at: now() + $1} where id = $2 and owner = $3 require 1
 *   fail    set q {owner: $1, error: $2, run_at: case when attempts >= $3 then null
 *             else now() + $4 * attempts * attempts end} where id = $5 and owner = $6 require 1
 *
 * The owner is a claim token, `<worker name>:<counter>`, new for each claim, so two claims of one
 * job by the same worker are told apart. `ack`, `extend` and `fail` answer `true`, or `false` when
 * the server refused them with 412: the lease lapsed and another claim took the job (stale).
 *
 * While a batch is being worked, a heartbeat extends the lease of each of its jobs not yet settled
 * every third of the lease, so a slow job is not handed to another worker. `stop()` (or aborting
 * `signal`) gives a held claim up at once (the server hands its job to the next waiting worker) and
 * ends the iteration after the job in hand; a job left unsettled is not acked, its lease lapses and
 * another claim takes it again (at least once).
 */
import { FenecError } from './errors.js';
import type { FenecHttp } from './http.js';
import { raw } from './conditions.js';
import type { Query, Row, Statement } from './query.js';
import { expr, inc } from './values.js';

const FAIL_RUN_AT = 'case when attempts >= ? then null else now() + ? * attempts * attempts end';

export interface WorkerOptions {
  /** The worker's name, the first half of each owner token. Default: `w-<8 random hex>`. */
  name?: string;
  /** Jobs a claim takes at most. Default 10. */
  batch?: number;
  /** How long a claimed job is the worker's, in milliseconds. Default 30 000. */
  leaseMs?: number;
  /** How long a claim is held at the server while no job is ready (`Fenec-Wait`). Default 30 000. */
  waitMs?: number;
  /** `fail` leaves a job dead (no ready time) once it has had this many attempts. Default 5. */
  deadAfter?: number;
  /** `fail` puts a job back `backoffMs × attempts²` later. Default 1 000. */
  backoffMs?: number;
  /** Extend the leases of the batch in hand every `leaseMs / 3`. Default true. */
  heartbeat?: boolean;
  /** Aborting it stops the worker, as `stop()` does. */
  signal?: AbortSignal;
}

export interface ClaimOptions {
  /** This claim's `Fenec-Wait`, instead of the worker's `waitMs`. */
  wait?: number;
  /** Sends the claim under this key: a retry with the same owner is answered the same jobs. */
  idempotencyKey?: string;
  /** The owner token; by default the next of this worker's. */
  owner?: string;
  signal?: AbortSignal;
}

export class Job {
  /** The row as the claim answered it (`returning *`). */
  readonly row: Row;
  /** The owner token of the claim that took it. */
  readonly owner: string;
  readonly #worker: Worker;
  /** True once acked or failed (or refused as stale). */
  settled = false;
  /** True once the server answered 412: the job is another claim's now. */
  lost = false;

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
    return Number(this.row.attempts ?? 0);
  }

  #mine(): Query {
    return this.#worker.queue.where('id', this.row.id).where('owner', this.owner);
  }

  toAck(): Statement {
    return this.#mine().toDelete({ require: 1 });
  }

  toExtend(leaseMs: number = this.#worker.leaseMs): Statement {
    return this.#mine().toUpdate({ run_at: expr('now() + ?', leaseMs) }, { require: 1 });
  }

  toFail(error: string, options: { backoffMs?: number; deadAfter?: number } = {}): Statement {
    return this.#mine().toUpdate(this.#failPatch(error, options), { require: 1 });
  }

  #failPatch(error: string, options: { backoffMs?: number; deadAfter?: number }) {
    const deadAfter = options.deadAfter ?? this.#worker.deadAfter;
    const backoff = options.backoffMs ?? this.#worker.backoffMs;
    return { owner: null, error, run_at: expr(FAIL_RUN_AT, deadAfter, backoff) };
  }

  async #settle(p: () => Promise<number>, final: boolean): Promise<boolean> {
    if (final) this.settled = true;
    try {
      return (await p()) === 1;
    } catch (e) {
      if (e instanceof FenecError && e.status === 412) {
        this.lost = true;
        this.settled = true;
        return false;
      }
      throw e;
    }
  }

  /** Done: deletes the job. False when its lease had lapsed and another claim took it. */
  ack(): Promise<boolean> {
    return this.#settle(() => this.#mine().delete({ require: 1 }), true);
  }

  /** Keeps the job `leaseMs` longer (the worker's lease by default). */
  extend(leaseMs: number = this.#worker.leaseMs): Promise<boolean> {
    return this.#settle(
      () => this.#mine().update({ run_at: expr('now() + ?', leaseMs) }, { require: 1 }),
      false,
    );
  }

  /** Failed: back in the queue after `backoffMs × attempts²`, or dead after `deadAfter` attempts. */
  fail(error: string, options: { backoffMs?: number; deadAfter?: number } = {}): Promise<boolean> {
    return this.#settle(() => this.#mine().update(this.#failPatch(error, options), { require: 1 }), true);
  }
}

function whole(name: string, v: number | undefined, fallback: number, min: number): number {
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
  readonly #db: FenecHttp;
  readonly #stopper = new AbortController();
  #claims = 0;

  /** @internal Use `db.worker(collection, options)`. */
  constructor(db: FenecHttp, collection: string, options: WorkerOptions) {
    this.#db = db;
    this.queue = db.from(collection);
    this.name = options.name ?? `w-${Array.from({ length: 8 }, () => Math.floor(Math.random() * 16).toString(16)).join('')}`;
    this.batch = whole('batch', options.batch, 10, 1);
    this.leaseMs = whole('leaseMs', options.leaseMs, 30000, 1);
    this.waitMs = whole('waitMs', options.waitMs, 30000, 0);
    this.deadAfter = whole('deadAfter', options.deadAfter, 5, 1);
    this.backoffMs = whole('backoffMs', options.backoffMs, 1000, 0);
    this.heartbeat = options.heartbeat ?? true;
    const outer = options.signal;
    if (outer?.aborted) this.stop();
    else outer?.addEventListener('abort', () => this.stop(), { once: true });
  }

  /** Whether `stop()` was called (or the signal aborted). */
  get stopped(): boolean {
    return this.#stopper.signal.aborted;
  }

  /** Ends the iteration after the job in hand; a held claim is given up at once. */
  stop(): void {
    if (!this.stopped) this.#stopper.abort(new DOMException('the worker was stopped', 'AbortError'));
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
   * server up to `waitMs` while none is ready. A stopped worker's claim answers no job.
   */
  async claim(options: ClaimOptions = {}): Promise<Job[]> {
    if (this.stopped) return [];
    const owner = options.owner ?? this.nextOwner();
    const db = options.idempotencyKey === undefined ? this.#db : this.#db.withIdempotencyKey(options.idempotencyKey);
    const joined = options.signal === undefined ? undefined : either(options.signal, this.#stopper.signal);
    const signal = joined?.signal ?? this.#stopper.signal;
    let rows: Row[];
    try {
      rows = await this.#claimChain(db).update(this.#claimPatch(owner), {
        returning: true,
        wait: options.wait ?? this.waitMs,
        signal,
      });
    } catch (e) {
      if (this.stopped) return [];
      throw e;
    } finally {
      joined?.release();
    }
    return rows.map((row) => new Job(this, row, owner));
  }

  /** Claims again and again, yielding each job of each batch, until `stop()`. */
  async *[Symbol.asyncIterator](): AsyncGenerator<Job, void, undefined> {
    while (!this.stopped) {
      const jobs = await this.claim();
      if (jobs.length === 0) continue;
      const beat = this.heartbeat ? this.#beat(jobs) : undefined;
      try {
        for (const job of jobs) {
          if (job.lost) continue;
          yield job;
          if (this.stopped) return;
        }
      } finally {
        if (beat !== undefined) clearInterval(beat);
      }
    }
  }

  #beat(jobs: Job[]): ReturnType<typeof setInterval> {
    const timer = setInterval(() => {
      for (const job of jobs) if (!job.settled && !job.lost) job.extend().catch(() => {});
    }, Math.max(1, Math.floor(this.leaseMs / 3)));
    // A heartbeat alone must not keep a process alive.
    (timer as { unref?: () => void }).unref?.();
    return timer;
  }

  /**
   * Runs `work` on every job until `stop()`: acked when it resolves, failed with its error's
   * message when it throws.
   */
  async run(work: (job: Job) => unknown): Promise<void> {
    for await (const job of this) {
      let failed: unknown;
      let threw = false;
      try {
        await work(job);
      } catch (e) {
        threw = true;
        failed = e;
      }
      if (threw) await job.fail(failed instanceof Error ? failed.message : String(failed));
      else await job.ack();
    }
  }
}

/** A signal aborted when either is; `release` takes its listeners off the two. */
function either(a: AbortSignal, b: AbortSignal): { signal: AbortSignal; release: () => void } {
  const ctl = new AbortController();
  const fromA = () => ctl.abort(a.reason);
  const fromB = () => ctl.abort(b.reason);
  if (a.aborted) fromA();
  else if (b.aborted) fromB();
  a.addEventListener('abort', fromA, { once: true });
  b.addEventListener('abort', fromB, { once: true });
  return {
    signal: ctl.signal,
    release: () => {
      a.removeEventListener('abort', fromA);
      b.removeEventListener('abort', fromB);
    },
  };
}
