/**
 * The connection: one POST /query per statement, POST /batch for a block, over the platform fetch
 * (clients.md §1, §3.1, §3.8).
 *
 * - The token goes as `Authorization: Bearer`; a key as `Idempotency-Key`; a wait as `Fenec-Wait`.
 *   Wait and key are headers only: they never change a statement's text or parameters.
 * - The client keeps the highest `Fenec-Seq` it has seen as `seq`, shared by its copies.
 * - Each request is bounded by the client's timeout, 30 000 ms unless `connect` is given another
 *   (`Infinity`: none), and a held claim by that timeout plus the wait it sent, so the client
 *   never cuts a held claim short and a frozen server does not leave a call pending for ever.
 * - Aborting the caller's `signal` abandons the request and closes its connection, which gives a
 *   held claim up at the server; the call rejects with the signal's reason (an AbortError unless
 *   the caller aborted with another reason).
 * - Servers (docs/clients.md, "Replicas and failover"): `connect` takes one URL or a list; the
 *   client keeps its current primary (at first the first URL). A 403 with `Fenec-Primary` makes
 *   that URL the primary and sends the same request there at once (2 hops at most per call); a
 *   connection that could not be opened (nothing sent) moves the primary to the next URL of the
 *   list and sends there, until each has failed once in the call; a 503 with `Retry-After` sends
 *   the next call to the next URL. With `readFrom: 'replica'`, the builder's reads (and a `run`
 *   with `read: true`) go to a URL that is not the primary with `Fenec-After` (the highest
 *   `Fenec-Seq` seen); a 504 there, or a replica that cannot be reached, sends them to the primary.
 */
import { FenecError } from './errors.js';
import { type Row, type Statement, type StatementSender, Query, checkWait } from './query.js';
import { deadline } from './signals.js';
import { encode, show } from './values.js';
import { type WorkerOptions, Worker } from './worker.js';

/** The bound of a request when `connect` is given none (a held one gets its wait on top). */
const DEFAULT_TIMEOUT_MS = 30000;
/** How many times one call follows a replica's 403 naming its primary before the 403 is the caller's. */
const MAX_HOPS = 2;
/** fetch's causes for a connection that could not be opened: nothing was sent, another server may be tried. */
const UNSENT = new Set([
  'ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EADDRNOTAVAIL', 'UND_ERR_CONNECT_TIMEOUT',
]);

/** Where reads go: the primary (the default), or a replica of the list (`Fenec-After` the last write seen). */
export type ReadFrom = 'primary' | 'replica';

export interface ConnectOptions {
  /** Sent as `Authorization: Bearer <token>`. */
  token?: string;
  /** Replaces `globalThis.fetch` (in tests, or on a platform without one). */
  fetch?: typeof fetch;
  /** Milliseconds that bound each request: 30 000 by default, `Infinity` for none. A held claim gets its wait on top. */
  timeout?: number;
  /** `'replica'` sends the builder's reads to a server of the list that is not the primary. Default `'primary'`. */
  readFrom?: ReadFrom;
}

export interface RunOptions {
  idempotencyKey?: string;
  /** `Fenec-Wait` in milliseconds. */
  wait?: number;
  signal?: AbortSignal;
  /** The text is a read: with `readFrom: 'replica'` it may go to a replica. Default false (the primary). */
  read?: boolean;
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

/** The servers a client was given, its current primary, and the turn of its replica reads. */
interface Servers {
  urls: string[];
  primary: string;
  readonly replicaReads: boolean;
  reads: number;
}

interface Shared {
  readonly servers: Servers;
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

  /** The base URL (no trailing `/`) writes and claims go to now: the current primary. */
  get url(): string {
    return this.#shared.servers.primary;
  }

  /** Every server this client knows, in its order: those it was given, then any a replica named. */
  get servers(): string[] {
    return [...this.#shared.servers.urls];
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
      read: options.read === true,
    });
    const { body, seq, replayed } = sent;
    if (Array.isArray(body)) return { kind: 'rows', rows: body as Row[], seq, replayed };
    const obj = (body ?? {}) as { affected?: unknown; message?: unknown };
    if (typeof obj.affected === 'number') return { kind: 'affected', count: obj.affected, seq, replayed };
    if (typeof obj.message === 'string') return { kind: 'message', message: obj.message, seq, replayed };
    throw new FenecError(`the server answered something a statement does not: ${show(body)}`, { status: 200 });
  }

  /** The rows one statement of raw text answers. */
  async rows(text: string, params: readonly unknown[] = [], options: { signal?: AbortSignal; read?: boolean } = {}): Promise<Row[]> {
    const r = await this.run(text, params, { signal: options.signal, read: options.read });
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
  async sendStatement(stmt: Statement, options: { wait?: number; signal?: AbortSignal; read?: boolean }): Promise<unknown> {
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
    options: { key?: string; wait?: number; signal?: AbortSignal; read?: boolean },
  ): Promise<Sent> {
    const shared = this.#shared;
    const headers: Record<string, string> = { 'content-type': contentType, accept: 'application/json' };
    if (shared.token !== undefined) headers.authorization = `Bearer ${shared.token}`;
    if (options.key !== undefined) headers['idempotency-key'] = options.key;
    if (options.wait !== undefined) headers['fenec-wait'] = String(options.wait);

    const limit = shared.timeout === undefined ? undefined : shared.timeout + (options.wait ?? 0);
    const bounded = limit === undefined ? undefined : deadline(options.signal, limit);
    const signal = bounded?.signal ?? options.signal;
    const servers = shared.servers;
    const replica = servers.replicaReads && options.read === true ? replicaOf(servers) : undefined;
    let reading = replica !== undefined;
    let url = replica ?? servers.primary;
    const failed = new Map<string, unknown>(); // the servers this call could not reach, and why
    let hops = 0;
    try {
      let res: Response;
      for (;;) {
        const sent = reading && shared.seq !== undefined ? { ...headers, 'fenec-after': String(shared.seq) } : headers;
        try {
          res = await shared.fetch(url + path, { method: 'POST', headers: sent, body, signal });
        } catch (e) {
          if (!unsent(e)) throw e;
          failed.set(url, e);
          url = reading ? servers.primary : moveOn(servers, url);
          reading = false;
          if (failed.has(url)) throw e;
          continue;
        }
        if (reading) {
          if (res.status === 504 && !failed.has(servers.primary)) {
            await res.body?.cancel();
            reading = false;
            url = servers.primary;
            continue;
          }
        } else if (res.status === 403) {
          const named = res.headers.get('fenec-primary')?.trim().replace(/\/+$/, '');
          if (named && hops < MAX_HOPS) {
            await res.body?.cancel();
            if (failed.has(named)) throw failed.get(named);
            hops += 1;
            makePrimary(servers, named);
            url = named;
            continue;
          }
        } else if (res.status === 503 && res.headers.has('retry-after') && servers.urls.length > 1) {
          moveOn(servers, url);
        }
        break;
      }
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

/**
 * Connects to a FenecDB server at `url` (e.g. `http://127.0.0.1:8080`), or to a list of servers (a
 * primary and its replicas, any order: a replica's refusal names the primary). Sends nothing yet.
 */
export function connect(url: string | readonly string[], options: ConnectOptions = {}): FenecHttp {
  const urls = (typeof url === 'string' ? [url] : Array.isArray(url) ? [...url] : [url]) as unknown[];
  if (urls.length === 0) throw new FenecError('connect() takes a URL or a list of them, not an empty list');
  for (const u of urls) {
    if (typeof u !== 'string' || !/^https?:\/\//i.test(u)) {
      throw new FenecError(`connect() takes an http:// or https:// URL: ${show(u)}`);
    }
  }
  const bases = [...new Set((urls as string[]).map((u) => u.replace(/\/+$/, '')))];
  if (options.readFrom !== undefined && options.readFrom !== 'primary' && options.readFrom !== 'replica') {
    throw new FenecError(`readFrom is 'primary' or 'replica' (got ${show(options.readFrom)})`);
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
      servers: { urls: bases, primary: bases[0]!, replicaReads: options.readFrom === 'replica', reads: 0 },
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

/** Whether fetch failed before anything was sent: the connection could not be opened. */
function unsent(e: unknown): boolean {
  if (!(e instanceof TypeError)) return false;
  const cause = e.cause as { code?: unknown; errors?: { code?: unknown }[] } | undefined;
  if (typeof cause?.code === 'string' && UNSENT.has(cause.code)) return true;
  // several addresses tried in turn (IPv6 and IPv4): unsent when every one was
  return Array.isArray(cause?.errors) && cause.errors.length > 0
    && cause.errors.every((x) => typeof x?.code === 'string' && UNSENT.has(x.code));
}

/** `url` failed: while it is still the primary, the next URL of the list becomes it. Answers the primary now. */
function moveOn(servers: Servers, url: string): string {
  const at = servers.urls.indexOf(url);
  if (servers.primary === url && at >= 0) servers.primary = servers.urls[(at + 1) % servers.urls.length]!;
  return servers.primary;
}

function makePrimary(servers: Servers, url: string): void {
  if (!servers.urls.includes(url)) servers.urls = [...servers.urls, url];
  servers.primary = url;
}

/** A URL of the list that is not the primary, in turn; undefined when there is none. */
function replicaOf(servers: Servers): string | undefined {
  const others = servers.urls.filter((u) => u !== servers.primary);
  if (others.length === 0) return undefined;
  servers.reads += 1;
  return others[servers.reads % others.length];
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
