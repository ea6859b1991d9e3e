/**
 * Conditions (R5–R10): the three `where` forms, `or`, `and`, `not` and `raw`, and how they are
 * written. Every condition is checked and its values encoded when it is made, so a refusal is
 * raised at the step that is wrong; writing happens when the chain ends.
 */
import { refuse } from './errors.js';
import { checkField } from './names.js';
import { encode, entries, isPlainMap, placeholders, show } from './values.js';

type Symbol = '=' | '!=' | '<' | '<=' | '>' | '>=' | '~' | 'has' | 'in';

const OPERATORS: Record<string, Symbol> = {
  '=': '=', eq: '=',
  '!=': '!=', ne: '!=', neq: '!=',
  '<': '<', lt: '<',
  '<=': '<=', lte: '<=', le: '<=',
  '>': '>', gt: '>',
  '>=': '>=', gte: '>=', ge: '>=',
  '~': '~', like: '~', contains: '~',
  has: 'has',
  in: 'in',
};

function operator(op: unknown): Symbol | undefined {
  return typeof op === 'string' && Object.hasOwn(OPERATORS, op) ? OPERATORS[op] : undefined;
}

/** A condition node. Made by `where`, `raw`, `or`, `and` and `not`; an object converts to one. */
export class Cond {
  /** @internal */
  readonly node: Node;
  /** @internal */
  constructor(node: Node) {
    this.node = node;
  }
}

/** What `where`, `orWhere`, `or`, `and` and `not` take as a condition. */
export type CondInput = Cond | Record<string, unknown> | Map<string, unknown>;

export type Node =
  | { kind: 'cmp'; field: string; op: Symbol | 'is null' | 'is not null'; value?: unknown }
  | { kind: 'raw'; text: string; params: unknown[] }
  | { kind: 'and' | 'or'; members: Node[] }
  | { kind: 'not'; inner: Node };

/** `field op value`, checked: the operator first, then the name, then the value. */
function compare(field: unknown, op: unknown, value: unknown, inMap: boolean): Node {
  const sym = operator(op);
  if (sym === undefined) {
    refuse(inMap ? `unknown operator \`${String(op)}\` (field: ${String(field)})` : `unknown operator \`${String(op)}\``);
  }
  const name = checkField(field);
  if (sym === 'in') {
    if (!Array.isArray(value)) refuse(`\`in\` expects an array (field: ${name})`);
    if (value.length === 0) refuse(`\`in\` does not accept an empty array (field: ${name})`);
    return { kind: 'cmp', field: name, op: 'in', value: value.map(encode) };
  }
  if (value === null || value === undefined) {
    if (sym === '=') return { kind: 'cmp', field: name, op: 'is null' };
    if (sym === '!=') return { kind: 'cmp', field: name, op: 'is not null' };
    refuse(`\`${sym}\` cannot be used with null (field: ${name})`);
  }
  return { kind: 'cmp', field: name, op: sym, value: encode(value) };
}

/** A field's operator map: each key an operator or `not`, in order, joined with `and`. */
function operatorMap(field: unknown, spec: Record<string, unknown> | Map<string, unknown>): Node {
  const pairs = entries(spec);
  for (const [k] of pairs) {
    if (k !== 'not' && operator(k) === undefined) refuse(`unknown operator \`${k}\` (field: ${String(field)})`);
  }
  const name = checkField(field);
  if (pairs.length === 0) refuse(`empty condition object (field: ${name})`);
  const members = pairs.map(([k, v]): Node => {
    if (k !== 'not') return compare(name, k, v, true);
    if (isPlainMap(v)) return { kind: 'not', inner: operatorMap(name, v) };
    return compare(name, '!=', v, true);
  });
  return { kind: 'and', members };
}

/** `where(field, spec)`: equality, or the field's operator map when the spec is a map. */
export function fieldSpec(field: unknown, spec: unknown): Node {
  if (isPlainMap(spec)) return operatorMap(field, spec);
  return compare(field, '=', spec, false);
}

/** An object condition: each field's value, null or operator map, in order, joined with `and`. */
function objectCondition(m: Record<string, unknown> | Map<string, unknown>): Node {
  return { kind: 'and', members: entries(m).map(([f, spec]) => fieldSpec(f, spec)) };
}

/** A condition from any of its one-argument forms. */
export function toNode(c: unknown): Node {
  if (c instanceof Cond) return c.node;
  if (isPlainMap(c)) return objectCondition(c);
  return refuse(`a condition is an object, raw(), or(), and() or not(): ${show(c)}`);
}

/** `where`'s three forms as a node: (cond), (field, spec), (field, op, value). */
export function whereNode(args: unknown[]): Node {
  switch (args.length) {
    case 1:
      return toNode(args[0]);
    case 2:
      return fieldSpec(args[0], args[1]);
    case 3:
      return compare(args[0], args[1], args[2], false);
    default:
      return refuse(`where takes (condition), (field, value) or (field, op, value): got ${args.length} arguments`);
  }
}

/** `raw(text, ...params)`: a condition written as given, each `?` the next parameter. */
export function raw(text: string, ...params: unknown[]): Cond {
  if (typeof text !== 'string') refuse(`raw() takes a text: ${show(text)}`);
  placeholders('raw', text, params.length);
  return new Cond({ kind: 'raw', text, params: params.map(encode) });
}

export function or(...conds: CondInput[]): Cond {
  return new Cond({ kind: 'or', members: conds.map(toNode) });
}

export function and(...conds: CondInput[]): Cond {
  return new Cond({ kind: 'and', members: conds.map(toNode) });
}

export function not(cond: CondInput): Cond {
  return new Cond({ kind: 'not', inner: toNode(cond) });
}

/** Joins two nodes; an absent left side leaves the right alone. */
export function join(kind: 'and' | 'or', left: Node | null, right: Node): Node {
  return left === null ? right : { kind, members: [left, right] };
}

/** A junction of one member becomes that member; an empty one disappears; like kinds merge. */
function simplify(n: Node): Node | null {
  if (n.kind === 'not') {
    const inner = simplify(n.inner);
    return inner === null ? null : { kind: 'not', inner };
  }
  if (n.kind !== 'and' && n.kind !== 'or') return n;
  const members: Node[] = [];
  for (const m of n.members) {
    const s = simplify(m);
    if (s === null) continue;
    if (s.kind === n.kind) members.push(...(s as { members: Node[] }).members);
    else members.push(s);
  }
  if (members.length === 0) return null;
  if (members.length === 1) return members[0];
  return { kind: n.kind, members };
}

/** Where parameters go as they are written: `$1`, `$2`, ... in text order. */
export class Params {
  readonly list: unknown[] = [];
  add(encoded: unknown): string {
    this.list.push(encoded);
    return `$${this.list.length}`;
  }
  /** A raw or expr text with each `?` replaced by the next placeholder. */
  bind(text: string, params: readonly unknown[]): string {
    let i = 0;
    return text.replace(/\?/g, () => this.add(params[i++]));
  }
}

/** True when the node writes nothing (every junction in it empty). */
export function isEmpty(n: Node | null): boolean {
  return n === null || simplify(n) === null;
}

/** The condition's text, or null when it writes nothing. */
export function render(n: Node | null, params: Params): string | null {
  if (n === null) return null;
  const s = simplify(n);
  return s === null ? null : write(s, params, null);
}

function write(n: Node, params: Params, parent: 'and' | 'or' | null): string {
  switch (n.kind) {
    case 'cmp':
      if (n.op === 'is null' || n.op === 'is not null') return `${n.field} ${n.op}`;
      if (n.op === 'in') return `${n.field} in [${(n.value as unknown[]).map((v) => params.add(v)).join(', ')}]`;
      return `${n.field} ${n.op} ${params.add(n.value)}`;
    case 'raw':
      return params.bind(n.text, n.params);
    case 'not':
      return `not (${write(n.inner, params, null)})`;
    case 'and':
    case 'or': {
      const text = n.members.map((m) => write(m, params, n.kind)).join(` ${n.kind} `);
      return parent !== null && parent !== n.kind ? `(${text})` : text;
    }
  }
}
