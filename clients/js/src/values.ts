/**
 * Values and the computed values of a patch (R14, R16).
 *
 * A value is always a parameter: it is encoded to the JSON the server reads and never goes into
 * the text. Dates become ISO-8601 UTC text to the millisecond, typed float arrays plain lists,
 * and lists and maps are encoded element by element, keeping a map's key order.
 */
import { refuse } from './errors.js';

/** `expr(text, ...params)`: a computed value of a patch, written as text with `?` bound. */
export class Expr {
  readonly text: string;
  readonly params: readonly unknown[];
  constructor(text: string, params: readonly unknown[]) {
    this.text = text;
    this.params = params;
  }
}

/** `inc(n)`: `f: coalesce(f, 0) + n`, so a null counts from 0. */
export class Inc {
  readonly by: number;
  constructor(by: number) {
    this.by = by;
  }
}

/** A value the builder writes as computed text: `expr(...)` or `inc(...)`. */
export type Computed = Expr | Inc;

/** A computed value: the text, with each `?` replaced by the next parameter (as `raw`). */
export function expr(text: string, ...params: unknown[]): Expr {
  if (typeof text !== 'string') refuse(`expr() takes a text: ${show(text)}`);
  placeholders('expr', text, params.length);
  return new Expr(text, params.map(encode));
}

/** An increment of a numeric field by `by` (1 when left out). */
export function inc(by: number = 1): Inc {
  if (typeof by !== 'number' || !Number.isFinite(by)) refuse(`inc() takes a number: ${show(by)}`);
  return new Inc(by);
}

/** Counts the `?` of a raw or expr text against its parameters, refusing a mismatch (R10, R16). */
export function placeholders(fn: 'raw' | 'expr', text: string, given: number): void {
  let wanted = 0;
  for (const ch of text) if (ch === '?') wanted++;
  if (wanted > given) refuse(`${fn}(): more \`?\` placeholders than parameters`);
  if (wanted < given) refuse(`${fn}(): too many parameters given`);
}

/** A value as a refusal message shows it: JSON, with numbers JSON cannot hold spelled out. */
export function show(v: unknown): string {
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  if (typeof v === 'bigint') return v.toString();
  if (v === undefined) return 'undefined';
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

/** A whole number from 0 to 2^53−1, as limit, offset, require and wait take. */
export function isCount(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;
}

/** True for an object written as `{...}` or a Map: a document, a condition or an operator map. */
export function isPlainMap(v: unknown): v is Record<string, unknown> | Map<string, unknown> {
  if (v instanceof Map) return true;
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** The entries of a map, in its order (a Map keeps any key order; an object its own). */
export function entries(m: Record<string, unknown> | Map<string, unknown>): [string, unknown][] {
  return m instanceof Map ? [...m.entries()] : Object.entries(m);
}

/** A parameter, as it goes over the wire: plain JSON data. */
export function encode(v: unknown): unknown {
  if (v === null || v === undefined) return null;
  switch (typeof v) {
    case 'string':
    case 'boolean':
      return v;
    case 'number':
      if (!Number.isFinite(v)) refuse(`a number parameter must be finite: ${show(v)}`);
      return v;
    case 'bigint':
      if (v > BigInt(Number.MAX_SAFE_INTEGER) || v < -BigInt(Number.MAX_SAFE_INTEGER)) {
        refuse(`a bigint parameter must fit a JSON number exactly: ${v}`);
      }
      return Number(v);
    case 'object':
      break;
    default:
      refuse(`cannot send a ${typeof v} as a value`);
  }
  if (v instanceof Date) {
    if (Number.isNaN(v.getTime())) refuse('cannot send an invalid Date');
    return v.toISOString(); // always UTC, to the millisecond: YYYY-MM-DDTHH:MM:SS.mmmZ
  }
  if (v instanceof Expr || v instanceof Inc) {
    refuse('expr() and inc() are values of a patch field, not of a parameter');
  }
  if (ArrayBuffer.isView(v) && !(v instanceof DataView)) {
    return Array.from(v as unknown as ArrayLike<number | bigint>, (x) => encode(x));
  }
  if (Array.isArray(v)) return v.map(encode);
  if (isPlainMap(v)) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of entries(v)) out[k] = encode(x);
    return out;
  }
  // Anything else with a toJSON (a class instance) goes as its JSON form.
  const json = (v as { toJSON?: () => unknown }).toJSON;
  if (typeof json === 'function') return encode(json.call(v));
  return encode({ ...(v as object) });
}
