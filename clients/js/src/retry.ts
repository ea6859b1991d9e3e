/**
 * How the worker lives through the server going away: which failures are tried again, how long it
 * pauses between tries, and the bound on each request.
 *
 * - Tried again (the contract's retry rule, conformance/worker-contract.json): the network (fetch's
 *   `TypeError`: refused, reset, an answer cut short or garbled), a request that ran past its timeout
 *   (`TimeoutError`), and any 5xx answer (a restart answers 503 while it loads its file). Any other
 *   answer is the request's own and is not: the worker ends `run` with it (412 excepted: a lost lease).
 * - The pause is "full jitter": a random time from 0 up to a cap that starts at the worker's
 *   `retryMinMs` and doubles with each failure in a row up to `retryMaxMs`, so workers cut off
 *   together do not all come back at the same moment.
 */
import { FenecError } from './errors.js';

/** Whether a failed call is worth sending again (see above). */
export function transient(e: unknown): boolean {
  if (e instanceof FenecError) {
    const s = e.status;
    // A status below 300 on a FenecError is an answer that is not what the server sends: a body
    // cut short or garbled on the way.
    return s !== undefined && (s >= 500 || s < 300);
  }
  if (e instanceof TypeError) return true;
  return (e as { name?: unknown } | null)?.name === 'TimeoutError';
}

/** A failure as one line: the message, and the system's code when fetch gives one (ECONNREFUSED). */
export function describe(e: unknown): string {
  if (e instanceof Error) {
    const code = (e.cause as { code?: unknown } | undefined)?.code;
    const text = e.message || e.name;
    return typeof code === 'string' ? `${text} (${code})` : text;
  }
  if (typeof e === 'string') return e;
  try {
    const json = JSON.stringify(e);
    if (json !== undefined) return json;
  } catch {
    // a value JSON cannot write (a cycle, a bigint): its String below
  }
  try {
    return String(e);
  } catch {
    return 'a value that cannot be written as text';
  }
}

/** The pauses between the tries of one call: full jitter under a doubling cap. */
export class Backoff {
  readonly #initialMs: number;
  readonly #maxMs: number;
  #cap: number;

  constructor(initialMs: number, maxMs: number) {
    this.#initialMs = initialMs;
    this.#maxMs = Math.max(initialMs, maxMs);
    this.#cap = initialMs;
  }

  /** The next pause, in milliseconds. */
  next(): number {
    const cap = this.#cap;
    this.#cap = Math.min(this.#maxMs, cap * 2);
    return Math.floor(Math.random() * (cap + 1));
  }

  /** Back to the first cap, after a call went through. */
  reset(): void {
    this.#cap = this.#initialMs;
  }
}

/** Waits `ms`, or less when `signal` aborts; never rejects. */
export function pause(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
