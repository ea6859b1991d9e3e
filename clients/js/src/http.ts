/**
 * The connection: one POST /query per statement, POST /batch for a block, over the platform fetch
 * (clients.md §1, §3.1, §3.8).
 *
 * - The token goes as `Authorization: Bearer`; a key as `Idempotency-Key`; a wait as `Fenec-Wait`.
 *   Wait and key are headers only: they never change a statement's text or parameters.
 * - The client keeps the highest `Fenec-Seq` it has seen as `seq`, shared by its copies.
 * - Each request is bounded by the client's timeout, 30 000 ms unless `connect` is given another
 *   (`Infinity`: none), and a held request by that timeout plus the wait it sent, so the client
 *   never cuts a held claim short and a frozen server does not leave a call pending for ever.
 * - Aborting the caller's `signal` abandons the request and closes its connection, which gives a
 *   held claim up at the server; the call rejects with the signal's reason (an AbortError unless
 *   the caller aborted with another reason).
 */
import { FenecError } from './errors.js';
import { type Row, type Statement, type StatementSender, Query, checkWait } from './query.js';
import { deadline } from './signals.js';
import { encode, show } from './values.js';
import { type WorkerOptions, Worker } from './worker.js';

/** The bound of a request when `connect` is given none (a held one gets its wait on top). */
const DEFAULT_TIMEOUT_MS = 30000;

export interface ConnectOptions {
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** Replaces `globalThis.fetch` (in tests, or on a platform without one). */
  fetch?: typeof fetch;
  /** Milliseconds that bound each request: 30 000 by default, `Infinity` for none. A held request gets its wait on top. */
  timeout?: number;
}

export interface RunOptions {
  idempotencyKey?: string;
  /** `Fenec-Wait` in milliseconds. */
  wait?: number;
  signal?: AbortSignal;
}

/** The answer of `run`. */
export type RunResult =
  | { kind: 'rows'; rows: Row[]; seq: number | undefined; replayed: boolean }
  | { kind: 'affected'; count: number; seq: number | undefined; replayed: boolean }
  | { kind: 'message'; message: string; seq: number | undefined; replayed: boolean };

/** One item of a batch's answer, as the server sends it. */
export type BatchItem = { rows: Row[] } | { affected: number } | { message: string };

export interface BatchResult {
  results: BatchItem[];
  seq: number | undefined;
  replayed: boolean;
}

/** What `batch` takes: a read query, a text alone, or a `[text, params]` pair (the `to*` tuples). */
export type BatchStatement = Query | string | Statement | readonly [string, readonly unknown[]];

interface Shared {
  readonly base: string;
  readonly token: string | undefined;
  readonly fetch: typeof fetch;
  readonly timeout: number | undefined;
  seq: number | undefined;
  replayed: boolean;
}

interface Sent {
  body: unknown;
  seq: number | undefined;
  replayed: boolean;
}

export class FenecHttp implements StatementSender {
  readonly #shared: Shared;
  readonly #key: string | undefined;

  /** @internal Use `connect(url, options)`. */
  constructor(shared: Shared, key: string | undefined) {
    this.#shared = shared;
    this.#key = key;
  }

  /** The server's base URL, without a trailing `/`. */
  get url(): string {
    return this.#shared.base;
  }

  /** The highest `Fenec-Seq` this client (and its copies) has seen, or undefined before any write. */
  get seq(): number | undefined {
    return this.#shared.seq;
  }

  /** Whether the last answer this client (and its copies) got was an `Idempotent-Replayed` one. */
  get replayed(): boolean {
    return this.#shared.replayed;
  }

  /** The idempotency key this copy's writes carry, if any. */
  get idempotencyKey(): string | undefined {
    return this.#key;
  }

  /** A query on `collection`, bound to this connection. */
  from(collection: string): Query {
    return Query.start(collection, this);
  }

  /** A copy whose writes (its builder's included) carry `Idempotency-Key: key`; it shares `seq`. */
  withIdempotencyKey(key: string): FenecHttp {
    return new FenecHttp(this.#shared, checkKey(key));
  }

  /** A worker over the queue `collection`: claims under a lease, ack, extend, fail, heartbeat, stop. */
  worker(collection: string, options: WorkerOptions = {}): Worker {
    return new Worker(this, collection, options);
  }

  /** One statement of raw text. */
  async run(text: string, params: readonly unknown[] = [], options: RunOptions = {}): Promise<RunResult> {
    if (typeof text !== 'string') throw new FenecError(`run() takes the statement's text: ${show(text)}`);
    const key = options.idempotencyKey === undefined ? this.#key : checkKey(options.idempotencyKey);
    if (!Array.isArray(params)) throw new FenecError(`run() takes its parameters as a list: ${show(params)}`);
    if (options.wait !== undefined) checkWait(options.wait);
    const sent = await this.#post('/query', JSON.stringify({ query: text, params: params.map(encode) }), 'application/json', {
      key,
      wait: options.wait,
      signal: options.signal,
    });
    const { body, seq, replayed } = sent;
    if (Array.isArray(body)) return { kind: 'rows', rows: body as Row[], seq, replayed };
    const obj = (body ?? {}) as { affected?: unknown; message?: unknown };
    if (typeof obj.affected === 'number') return { kind: 'affected', count: obj.affected, seq, replayed };
    if (typeof obj.message === 'string') return { kind: 'message', message: obj.message, seq, replayed };
    throw new FenecError(`the server answered something a statement does not: ${show(body)}`, { status: 200 });
  }

  /** The rows one statement of raw text answers. */
  async rows(text: string, params: readonly unknown[] = [], options: { signal?: AbortSignal } = {}): Promise<Row[]> {
    const r = await this.run(text, params, { signal: options.signal });
    if (r.kind !== 'rows') throw new FenecError(`expected rows, the server answered ${r.kind}`, { status: 200 });
    return r.rows;
  }

  /** Several statements as one all-or-nothing block (POST /batch). A refusal carries `at`. */
  async batch(statements: readonly BatchStatement[], options: RunOptions = {}): Promise<BatchResult> {
    const key = options.idempotencyKey === undefined ? this.#key : checkKey(options.idempotencyKey);
    if (options.wait !== undefined) checkWait(options.wait);
    if (!Array.isArray(statements) || statements.length === 0) {
      throw new FenecError('a batch holds at least one statement');
    }
    const lines = statements.map((s) => {
      const [text, params] = statementOf(s);
      return JSON.stringify({ query: text, params: params.map(encode) });
    });
    const sent = await this.#post('/batch', lines.join('\n') + '\n', 'application/x-ndjson', {
      key,
      wait: options.wait,
      signal: options.signal,
    });
    const results = (sent.body as { results?: unknown })?.results;
    if (!Array.isArray(results)) {
      throw new FenecError(`the server answered a batch without results: ${show(sent.body)}`, { status: 200 });
    }
    // A read's item is {"rows": [...]} (http.md §4); a server that answers the bare /query form
    // (an array) is read the same, so callers see one shape.
    const items = results.map((r): BatchItem => (Array.isArray(r) ? { rows: r as Row[] } : (r as BatchItem)));
    return { results: items, seq: sent.seq, replayed: sent.replayed };
  }

  /** @internal The seam a query's endpoints send through: the answer body as JSON. */
  async sendStatement(stmt: Statement, options: { wait?: number; signal?: AbortSignal }): Promise<unknown> {
    const [text, params] = stmt;
    const body = JSON.stringify({ query: text, params });
    // Reads carry the key too: the server ignores it on a read, and a chain's kind is its text's.
    const sent = await this.#post('/query', body, 'application/json', { key: this.#key, ...options });
    return sent.body;
  }

  async #post(
    path: string,
    body: string,
    contentType: string,
    options: { key?: string; wait?: number; signal?: AbortSignal },
  ): Promise<Sent> {
    const shared = this.#shared;
    const headers: Record<string, string> = { 'content-type': contentType, accept: 'application/json' };
    if (shared.token !== undefined) headers.authorization = `Bearer ${shared.token}`;
    if (options.key !== undefined) headers['idempotency-key'] = options.key;
    if (options.wait !== undefined) headers['fenec-wait'] = String(options.wait);

    const limit = shared.timeout === undefined ? undefined : shared.timeout + (options.wait ?? 0);
    const bounded = limit === undefined ? undefined : deadline(options.signal, limit);
    const signal = bounded?.signal ?? options.signal;
    try {
      const res = await shared.fetch(shared.base + path, { method: 'POST', headers, body, signal });
      const text = await res.text();
      const seqHeader = res.headers.get('fenec-seq');
      const replayed = res.headers.get('idempotent-replayed') === 'true';
      let parsed: unknown;
      try {
        parsed = text === '' ? null : JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      if (res.status >= 400) {
        const e = (parsed ?? {}) as { error?: unknown; at?: unknown; completed?: unknown };
        const message = typeof e.error === 'string' ? e.error : text || `HTTP ${res.status}`;
        throw new FenecError(message, {
          status: res.status,
          at: typeof e.at === 'number' ? e.at : undefined,
          completed: typeof e.completed === 'number' ? e.completed : undefined,
        });
      }
      if (parsed === undefined) {
        throw new FenecError(`the server answered text that is not JSON: ${text.slice(0, 200)}`, { status: res.status });
      }
      let seq: number | undefined;
      if (seqHeader !== null && /^\d+$/.test(seqHeader.trim())) {
        seq = Number(seqHeader.trim());
        if (shared.seq === undefined || seq > shared.seq) shared.seq = seq;
      }
      shared.replayed = replayed;
      return { body: parsed, seq, replayed };
    } finally {
      bounded?.release();
    }
  }
}

/** Connects to a FenecDB server at `url` (e.g. `http://127.0.0.1:8080`). Sends nothing yet. */
export function connect(url: string, options: ConnectOptions = {}): FenecHttp {
  if (typeof url !== 'string' || !/^https?:\/\//i.test(url)) {
    throw new FenecError(`connect() takes an http:// or https:// URL: ${show(url)}`);
  }
  const f = options.fetch ?? globalThis.fetch;
  if (typeof f !== 'function') throw new FenecError('no fetch on this platform: pass connect(url, { fetch })');
  if (options.timeout !== undefined && !(typeof options.timeout === 'number' && options.timeout > 0)) {
    throw new FenecError(`timeout is milliseconds, a number above 0 (got ${show(options.timeout)})`);
  }
  const timeout = options.timeout ?? DEFAULT_TIMEOUT_MS;
  if (options.token !== undefined && typeof options.token !== 'string') {
    throw new FenecError('a token is a text');
  }
  return new FenecHttp(
    {
      base: url.replace(/\/+$/, ''),
      token: options.token,
      // Called unbound, as the platform's fetch wants (a method-call `this` breaks it in browsers).
      fetch: (input, init) => f(input, init),
      timeout: Number.isFinite(timeout) ? timeout : undefined,
      seq: undefined,
      replayed: false,
    },
    undefined,
  );
}

function checkKey(key: unknown): string {
  if (typeof key !== 'string' || key === '') throw new FenecError('an idempotency key is a text, not empty');
  return key;
}

function statementOf(s: BatchStatement): readonly [string, readonly unknown[]] {
  if (s instanceof Query) return s.toFenecQL();
  if (typeof s === 'string') return [s, []];
  if (Array.isArray(s) && typeof s[0] === 'string') return [s[0], Array.isArray(s[1]) ? s[1] : []];
  throw new FenecError(`a batch statement is a query, a text or [text, params]: ${show(s)}`);
}
