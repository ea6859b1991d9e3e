/**
 * One claimed job and the statements that settle it (the workers page, "What a worker sends"),
 * each naming the job's id and the owner token of the claim that took it:
 *
 *   ack       del q where id = $1 and owner = $2 require 1
 *             (keepDone: set q {owner: $1, run_at: $2, done_at: now()} where id = $3 and owner = $4 require 1)
 *   extend    set q {run_at: now() + $1} where id = $2 and owner = $3 require 1
 *   fail      set q {owner: $1, error: $2, run_at: case when attempts >= $3 then null else now() + $4 end}
 *               where id = $5 and owner = $6 require 1
 *             ($3 the worker's max attempts, $4 its backoff(attempts) in milliseconds, worked out from the
 *             attempts the claim read)
 *   dead      set q {owner: $1, error: $2, run_at: $3} where id = $4 and owner = $5 require 1
 *   release   set q {owner: $1, run_at: now(), attempts: coalesce(attempts, 0) + $2} where id = $3 and owner = $4
 *             ($2 is -1: the attempt the claim added is taken off)
 *
 * A 412 on ack, extend, fail or dead means the lease was lost: another claim holds the job. The job
 * is then `lost`, its `signal` aborts, and nothing more is written for it. Sending, with its
 * retries, its timeout and its Idempotency-Key, is the worker's (`JobHost.send`).
 */
import type { Query, Statement } from './query.js';
import { expr, inc } from './values.js';

const FAIL_RUN_AT = 'case when attempts >= ? then null else now() + ? end';
export const EXHAUSTED = 'attempts exhausted';

/** Where a job stands in the worker's hands. */
export type JobState = 'waiting' | 'running' | 'settled';

/** Options of one `fail`. */
export interface FailOptions {
  /** Ready again this many milliseconds later (by default the worker's `backoff(attempts)`). */
  delayMs?: number;
  /** Dead once attempts reach this (the worker's `maxAttempts` by default). */
  maxAttempts?: number;
}

/** @internal What a job needs of its worker. */
export interface JobHost {
  readonly queue: Query;
  readonly leaseMs: number;
  readonly maxAttempts: number;
  readonly keepDone: boolean;
  /** The worker's backoff for a job failed at `attempts`, in whole milliseconds. */
  delayFor(attempts: number): number;
  /**
   * Sends `stmt` under the key `<kind>:<owner>:<id><suffix>` (and the worker's instance), trying
   * again on the network and 5xx; the count, or `false` on a 412.
   */
  send(job: Job, kind: string, stmt: Statement, suffix?: string): Promise<number | false>;
}

export class Job {
  /** The row as the claim answered it (`returning *`). */
  readonly row: Record<string, unknown>;
  /** The owner token of the claim that took it. */
  readonly owner: string;
  readonly #host: JobHost;
  readonly #abort = new AbortController();
  #beats = 0;
  /** `waiting` (claimed, not started), `running` (in a handler), `settled` (acked, failed, given back or lost). */
  state: JobState = 'waiting';
  /** True once the server answered 412: the job is another claim's now. */
  lost = false;

  /** @internal */
  constructor(host: JobHost, row: Record<string, unknown>, owner: string) {
    this.#host = host;
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

  /** True once acked, failed, given back or lost: nothing more is written for it. */
  get settled(): boolean {
    return this.state === 'settled';
  }

  /** Aborts when the job's lease is lost (another claim took it) or the worker is stopped hard. */
  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  /** @internal Ends the job's work: its signal aborts with `reason`. */
  cancel(reason: unknown): void {
    if (!this.#abort.signal.aborted) this.#abort.abort(reason);
  }

  /** @internal The lease was lost: settled, told through the signal. */
  markLost(): void {
    this.lost = true;
    this.state = 'settled';
    this.cancel(new DOMException('the job\'s lease was lost: another claim holds it', 'AbortError'));
  }

  #mine(): Query {
    return this.#host.queue.where('id', this.row.id).where('owner', this.owner);
  }

  toAck(): Statement {
    if (this.#host.keepDone) {
      return this.#mine().toUpdate({ owner: null, run_at: null, done_at: expr('now()') }, { require: 1 });
    }
    return this.#mine().toDelete({ require: 1 });
  }

  toExtend(leaseMs: number = this.#host.leaseMs): Statement {
    return this.#mine().toUpdate({ run_at: expr('now() + ?', leaseMs) }, { require: 1 });
  }

  toFail(error: string, options: FailOptions = {}): Statement {
    const maxAttempts = options.maxAttempts ?? this.#host.maxAttempts;
    const runAt = expr(FAIL_RUN_AT, maxAttempts, options.delayMs ?? this.#host.delayFor(this.attempts));
    return this.#mine().toUpdate({ owner: null, error, run_at: runAt }, { require: 1 });
  }

  /** The dead letter of a job claimed past its attempts: never run. */
  toDeadLetter(error: string = EXHAUSTED): Statement {
    return this.#mine().toUpdate({ owner: null, error, run_at: null }, { require: 1 });
  }

  /** Gives an unstarted job back: ready at once, its attempt not counted. */
  toRelease(): Statement {
    return this.#mine().toUpdate({ owner: null, run_at: expr('now()'), attempts: inc(-1) });
  }

  async #final(kind: string, stmt: Statement): Promise<boolean> {
    // Settled before it is sent, so a heartbeat that crosses it on the way is no news.
    this.state = 'settled';
    const n = await this.#host.send(this, kind, stmt);
    return n !== false && n >= 1;
  }

  /** Done: deletes the job (or marks it done, `keepDone`). False when its lease was lost. */
  ack(): Promise<boolean> {
    return this.#final('ack', this.toAck());
  }

  /** Keeps the job `leaseMs` longer (the worker's lease by default). False when its lease was lost. */
  async extend(leaseMs: number = this.#host.leaseMs): Promise<boolean> {
    const n = await this.#host.send(this, 'extend', this.toExtend(leaseMs), `:${++this.#beats}`);
    return n !== false && n >= 1;
  }

  /** Failed: back in the queue after the backoff, or dead once its attempts reach the limit. */
  fail(error: string, options: FailOptions = {}): Promise<boolean> {
    return this.#final('fail', this.toFail(error, options));
  }

  /** Dead-lettered without running (`error: "attempts exhausted"`). */
  deadLetter(error: string = EXHAUSTED): Promise<boolean> {
    return this.#final('dead', this.toDeadLetter(error));
  }

  /** Given back unstarted: ready at once for the next claim, its attempt not counted. */
  release(): Promise<boolean> {
    return this.#final('release', this.toRelease());
  }
}
