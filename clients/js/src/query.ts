/**
 * The immutable query builder and the text rules (clients.md §2, §5 R1–R22).
 *
 * Each step hands back a new Query and leaves the old one alone, so one base query may start
 * many chains. Values are always parameters (`$1`, `$2`, ... in the order they stand in the
 * text); names, directions and counts are literals, checked before they are written. Every
 * refusal is a FenecError without a status, raised at the step that is wrong, before any request.
 *
 *   get <c>[ select <list>][ where <cond>][ order <keys>][ limit <n>][ offset <n>][ require <n>][ count]
 *   put <c> <doc>|[<doc>, ...][ if absent][ require <n>]
 *   set <c> <doc>[ where <cond>][ order <keys>][ limit <n>][ returning <list>|*][ require <n>]
 *   del <c>[ where <cond>][ order <keys>][ limit <n>][ returning <list>|*][ require <n>]
 */
import { type CondInput, type Node, Params, isEmpty, join, render, whereNode } from './conditions.js';
import { FenecError, refuse } from './errors.js';
import { checkCollection, checkField } from './names.js';
import { Expr, Inc, encode, entries, isCount, isPlainMap, show } from './values.js';

/** A statement: its text and its parameter list. */
export type Statement = [text: string, params: unknown[]];

/** A row as the server answers it. */
export type Row = Record<string, unknown>;

/** A document or a patch: field (or path) → value, `expr(...)` or (in a patch) `inc(...)`. */
export type Doc = Record<string, unknown> | Map<string, unknown>;

export interface InsertOptions {
  /** ` require n`: the put must write exactly n documents, else 412 and nothing lands. */
  require?: number;
  /** ` if absent`: a document whose id or unique value is taken is skipped, not refused. */
  ifAbsent?: boolean;
  /** Milliseconds; only for the endpoint. A put is never held, so the server refuses it (400). */
  wait?: number;
  signal?: AbortSignal;
}

export interface WriteOptions {
  /** Allow an update or delete with no condition and no limit: the whole collection. */
  all?: boolean;
  /** ` require n`: the write must take exactly n rows, else 412 and nothing lands. */
  require?: number;
  /** `true` or `['*']` for every field, or a list of fields or paths: answer the rows. */
  returning?: boolean | readonly string[];
  /** `Fenec-Wait` in milliseconds: hold the write at the server until it can take a row. */
  wait?: number;
  /** Abort to give the request (and a held claim) up. */
  signal?: AbortSignal;
}

export interface ReadOptions {
  signal?: AbortSignal;
}

/** What a query needs from a connection to send its one statement. */
export interface StatementSender {
  /** `read`: the statement is the builder's read (with `readFrom: 'replica'` it may go to a replica). */
  sendStatement(stmt: Statement, options: { wait?: number; signal?: AbortSignal; read?: boolean }): Promise<unknown>;
}

interface State {
  readonly collection: string;
  readonly select: readonly string[] | null;
  readonly cond: Node | null;
  readonly order: readonly string[];
  readonly limit: number | null;
  readonly offset: number | null;
  readonly require: number | null;
  readonly sender: StatementSender | null;
}

type Verb = 'insert' | 'update' | 'delete';

export class Query {
  readonly #s: State;

  /** @internal Use `from(name)` or `db.from(name)`. */
  constructor(state: State) {
    this.#s = state;
  }

  /** @internal */
  static start(collection: string, sender: StatementSender | null): Query {
    return new Query({
      collection: checkCollection(collection),
      select: null,
      cond: null,
      order: [],
      limit: null,
      offset: null,
      require: null,
      sender,
    });
  }

  #with(change: Partial<State>): Query {
    return new Query({ ...this.#s, ...change });
  }

  /** The collection this query reads or writes. */
  get collection(): string {
    return this.#s.collection;
  }

  // ---- builder steps ----

  /** `where(field, op, value)`, `where(field, value)` or `where(condition)`; joined with `and`. */
  where(condition: CondInput): Query;
  where(field: string, value: unknown): Query;
  where(field: string, op: string, value: unknown): Query;
  where(...args: unknown[]): Query {
    return this.#with({ cond: join('and', this.#s.cond, whereNode(args)) });
  }

  /** Joins everything conditioned so far with `or` to the new condition (`where`'s forms). */
  orWhere(condition: CondInput): Query;
  orWhere(field: string, value: unknown): Query;
  orWhere(field: string, op: string, value: unknown): Query;
  orWhere(...args: unknown[]): Query {
    const right = whereNode(args);
    const left = isEmpty(this.#s.cond) ? null : this.#s.cond;
    return this.#with({ cond: join('or', left, right) });
  }

  /** The fields to answer; none, or `*` among them, means every field. A later call replaces. */
  select(...fields: string[]): Query {
    if (fields.includes('*')) {
      for (const f of fields) if (f !== '*') checkField(f);
      return this.#with({ select: null });
    }
    return this.#with({ select: fields.length === 0 ? null : fields.map(checkField) });
  }

  /** Adds a sort key; the direction is `asc` or `desc`, in any case. */
  order(field: string, direction: string = 'asc'): Query {
    const name = checkField(field);
    const dir = typeof direction === 'string' ? direction.toLowerCase() : direction;
    if (dir !== 'asc' && dir !== 'desc') refuse(`order direction must be 'asc' or 'desc': ${String(direction)}`);
    return this.#with({ order: [...this.#s.order, `${name} ${dir}`] });
  }

  limit(n: number): Query {
    if (!isCount(n)) refuse(`limit must be a non-negative integer: ${String(n)}`);
    return this.#with({ limit: n });
  }

  offset(n: number): Query {
    if (!isCount(n)) refuse(`offset must be a non-negative integer: ${String(n)}`);
    return this.#with({ offset: n });
  }

  /** ` require n` on a read: the read must answer exactly n rows, else 412. */
  require(n: number): Query {
    return this.#with({ require: checkRequire(n) });
  }

  // ---- text ----

  #where(params: Params): string {
    const text = render(this.#s.cond, params);
    return text === null ? '' : ` where ${text}`;
  }

  #order(): string {
    return this.#s.order.length === 0 ? '' : ` order ${this.#s.order.join(', ')}`;
  }

  #read(limit: number | null, count: boolean): Statement {
    const s = this.#s;
    const params = new Params();
    let text = `get ${s.collection}`;
    if (s.select !== null) text += ` select ${s.select.join(', ')}`;
    text += this.#where(params);
    text += this.#order();
    if (limit !== null) text += ` limit ${limit}`;
    if (s.offset !== null && s.offset !== 0) text += ` offset ${s.offset}`;
    if (s.require !== null) text += ` require ${s.require}`;
    if (count) text += ' count';
    return [text, params.list];
  }

  /** The read's text and parameters; runs nothing. */
  toFenecQL(): Statement {
    return this.#read(this.#s.limit, false);
  }

  #countStatement(): Statement {
    const s = this.#s;
    const held: [string, boolean][] = [
      ['order', s.order.length > 0],
      ['limit', s.limit !== null],
      ['offset', s.offset !== null],
      ['select', s.select !== null],
      ['require', s.require !== null],
    ];
    for (const [clause, there] of held) if (there) refuse(`count cannot be used with \`${clause}\``);
    return this.#read(null, true);
  }

  /** Refuses the clauses a write cannot take (R18), in the rule's order. */
  #checkWrite(verb: Verb): void {
    const s = this.#s;
    if (s.require !== null) refuse(`${verb} takes require as its option: ${verb}(..., { require: n })`);
    const refused: [string, boolean][] = [
      ['order', verb === 'insert' && s.order.length > 0],
      ['limit', verb === 'insert' && s.limit !== null],
      ['offset', s.offset !== null],
      ['select', s.select !== null],
      ['where', verb === 'insert' && s.cond !== null],
    ];
    for (const [clause, there] of refused) if (there) refuse(`${verb} cannot be used with \`${clause}\``);
  }

  /** An update or delete with no condition and no limit needs `all: true` (R17). */
  #checkBounded(verb: 'update' | 'delete', all: unknown): void {
    if (all === true || this.#s.limit !== null || !isEmpty(this.#s.cond)) return;
    refuse(`an unfiltered ${verb} covers the whole collection; if you mean it, ${verb}({ all: true })`);
  }

  /** The `put`: one document, or several in one statement. */
  toInsert(docs: Doc | readonly Doc[], options: InsertOptions = {}): Statement {
    this.#checkWrite('insert');
    const params = new Params();
    let body: string;
    if (Array.isArray(docs)) {
      if (docs.length === 0) refuse('cannot write an empty document list');
      const written = docs.map((d) => document(d, params, 'insert'));
      body = written.length === 1 ? written[0] : `[${written.join(', ')}]`;
    } else {
      body = document(docs as Doc, params, 'insert');
    }
    let text = `put ${this.#s.collection} ${body}`;
    if (options.ifAbsent === true) text += ' if absent';
    if (options.require !== undefined && options.require !== null) text += ` require ${checkRequire(options.require)}`;
    return [text, params.list];
  }

  /** The `set`: the patch first, then the where, order, limit, returning and require. */
  toUpdate(patch: Doc, options: WriteOptions = {}): Statement {
    this.#checkWrite('update');
    this.#checkBounded('update', options.all);
    if (Array.isArray(patch)) refuse('update takes one patch document, not a list');
    const params = new Params();
    let text = `set ${this.#s.collection} ${document(patch, params, 'update')}`;
    return [text + this.#picking(params, options), params.list];
  }

  /** The `del`: where, order, limit, returning and require. */
  toDelete(options: WriteOptions = {}): Statement {
    this.#checkWrite('delete');
    this.#checkBounded('delete', options.all);
    const params = new Params();
    const text = `del ${this.#s.collection}`;
    return [text + this.#picking(params, options), params.list];
  }

  #picking(params: Params, options: WriteOptions): string {
    let text = this.#where(params) + this.#order();
    if (this.#s.limit !== null) text += ` limit ${this.#s.limit}`;
    const ret = returningList(options.returning);
    if (ret !== null) text += ` returning ${ret}`;
    if (options.require !== undefined && options.require !== null) text += ` require ${checkRequire(options.require)}`;
    return text;
  }

  // ---- endpoints: each sends exactly one POST /query ----

  #sender(): StatementSender {
    if (this.#s.sender === null) {
      refuse(`this query has no connection: start it with db.from('${this.#s.collection}') to run it`);
    }
    return this.#s.sender;
  }

  /** The rows the read answers. */
  async rows(options: ReadOptions = {}): Promise<Row[]> {
    const stmt = this.toFenecQL();
    return asRows(await this.#sender().sendStatement(stmt, { signal: options.signal, read: true }));
  }

  /** The first row the read answers (its limit replaced by 1, a `require` kept), or null. */
  async first(options: ReadOptions = {}): Promise<Row | null> {
    const stmt = this.#read(1, false);
    const rows = asRows(await this.#sender().sendStatement(stmt, { signal: options.signal, read: true }));
    return rows[0] ?? null;
  }

  /** How many rows the condition matches. */
  async count(options: ReadOptions = {}): Promise<number> {
    const stmt = this.#countStatement();
    const rows = asRows(await this.#sender().sendStatement(stmt, { signal: options.signal, read: true }));
    const n = rows[0]?.count;
    if (typeof n !== 'number') throw new FenecError(`a count answered no count: ${show(rows)}`, { status: 200 });
    return n;
  }

  /** Writes one document or several; answers the count written. `insert([])` sends nothing. */
  async insert(docs: Doc | readonly Doc[], options: InsertOptions = {}): Promise<number> {
    if (Array.isArray(docs) && docs.length === 0) {
      this.#checkWrite('insert');
      return 0;
    }
    const stmt = this.toInsert(docs, options);
    return affected(await this.#send(stmt, options));
  }

  /** Updates the rows picked; answers the count, or with `returning` the rows as written. */
  update(patch: Doc, options: WriteOptions & { returning: true | readonly string[] }): Promise<Row[]>;
  update(patch: Doc, options?: WriteOptions): Promise<number>;
  async update(patch: Doc, options: WriteOptions = {}): Promise<number | Row[]> {
    const stmt = this.toUpdate(patch, options);
    const answer = await this.#send(stmt, options);
    return returningList(options.returning) === null ? affected(answer) : asRows(answer);
  }

  /** Deletes the rows picked; answers the count, or with `returning` the rows as they were. */
  delete(options: WriteOptions & { returning: true | readonly string[] }): Promise<Row[]>;
  delete(options?: WriteOptions): Promise<number>;
  async delete(options: WriteOptions = {}): Promise<number | Row[]> {
    const stmt = this.toDelete(options);
    const answer = await this.#send(stmt, options);
    return returningList(options.returning) === null ? affected(answer) : asRows(answer);
  }

  #send(stmt: Statement, options: { wait?: number; signal?: AbortSignal }): Promise<unknown> {
    const sender = this.#sender();
    if (options.wait !== undefined) checkWait(options.wait);
    return sender.sendStatement(stmt, { wait: options.wait, signal: options.signal });
  }
}

/** `from(name)` unbound: a query that gives text only. */
export function from(collection: string): Query {
  return Query.start(collection, null);
}

export function checkRequire(n: unknown): number {
  if (!isCount(n)) refuse(`require takes a count of rows, a whole number from 0 (got ${show(n)})`);
  return n;
}

export function checkWait(ms: unknown): number {
  if (!isCount(ms)) refuse(`wait is milliseconds, a whole number from 0 (got ${show(ms)})`);
  return ms;
}

/** The ` returning` list, `*`, or null for none (R19). */
function returningList(r: unknown): string | null {
  if (r === undefined || r === null || r === false) return null;
  if (r === true) return '*';
  if (!Array.isArray(r)) refuse(`returning is true or a list of fields: ${show(r)}`);
  if (r.length === 0) refuse('returning names the fields it answers, or * for every one');
  if (r.includes('*')) {
    if (r.length > 1) refuse('returning * answers every field: it takes no other');
    return '*';
  }
  return r.map(checkField).join(', ');
}

/** A document as `{k: v, k2: v2}`, in its key order (R15, R16). */
function document(doc: unknown, params: Params, verb: 'insert' | 'update'): string {
  if (!isPlainMap(doc)) refuse(`a document is an object of fields: ${show(doc)}`);
  const pairs = entries(doc);
  if (pairs.length === 0) refuse('cannot write an empty document');
  const parts = pairs.map(([field, value]) => {
    const name = checkField(field);
    if (value instanceof Inc) {
      if (verb === 'insert') refuse(`inc() reads the row it changes: use it in update (field: ${name})`);
      return `${name}: coalesce(${name}, 0) + ${params.add(value.by)}`;
    }
    if (value instanceof Expr) return `${name}: ${params.bind(value.text, value.params)}`;
    return `${name}: ${params.add(encode(value))}`;
  });
  return `{${parts.join(', ')}}`;
}

function asRows(answer: unknown): Row[] {
  if (Array.isArray(answer)) return answer as Row[];
  throw new FenecError(`expected rows, the server answered ${show(answer)}`, { status: 200 });
}

function affected(answer: unknown): number {
  const n = (answer as { affected?: unknown } | null)?.affected;
  if (typeof n === 'number') return n;
  throw new FenecError(`expected {"affected": n}, the server answered ${show(answer)}`, { status: 200 });
}
