// The builder-vectors runner (conformance.md Part A): replays every case of a vectors file
// through this SDK and reports `ok`, `FAIL` or `checked-elsewhere` for each, then a tally.
// Endpoint cases run against an injected capture fetch, so their headers are checked here too.
import { readFileSync } from 'node:fs';
import * as sdk from '@fenecdb/web/client';
import { captureFetch } from '../capture.mjs';
import { parseKinds, differ, show } from './json-kinds.mjs';

const STEPS = new Set(['select', 'where', 'orWhere', 'order', 'limit', 'offset', 'require']);
const TEXT_ONLY = new Set(['toFenecQL', 'toInsert', 'toUpdate', 'toDelete']);
const ENDPOINTS = new Set(['rows', 'first', 'count', 'insert', 'update', 'delete']);

class CaseFailure extends Error {}

/** Decodes a case argument (A.3): `$`-encodings into SDK values, recursively. */
export function decode(v) {
  if (Array.isArray(v)) return v.map(decode);
  if (v === null || typeof v !== 'object') return v;
  const keys = Object.keys(v);
  if (keys.length === 1 && keys[0].startsWith('$')) {
    const arg = v[keys[0]];
    const list = () => {
      if (!Array.isArray(arg)) throw new CaseFailure(`${keys[0]} takes a list`);
      return arg.map(decode);
    };
    switch (keys[0]) {
      case '$or': return sdk.or(...list());
      case '$and': return sdk.and(...list());
      case '$not': return sdk.not(decode(arg));
      case '$raw': { const [t, ...p] = list(); return sdk.raw(t, ...p); }
      case '$expr': { const [t, ...p] = list(); return sdk.expr(t, ...p); }
      case '$inc': return sdk.inc(decode(arg));
      case '$date': return new Date(arg);
      case '$f32': return Float32Array.from(list());
      default: throw new CaseFailure(`unknown encoding ${keys[0]}`);
    }
  }
  const out = {};
  for (const k of keys) out[k] = decode(v[k]);
  return out;
}

/** Runs one case; resolves to {ok: true} or {ok: false, why}. */
export async function runCase(c, expectedParams) {
  const steps = c.steps;
  if (!Array.isArray(steps) || steps.length < 2 || steps[0]?.op !== 'from') return { ok: false, why: 'malformed case' };
  for (const s of steps.slice(1)) {
    if (!STEPS.has(s?.op) && !TEXT_ONLY.has(s?.op) && !ENDPOINTS.has(s?.op)) return { ok: false, why: `unsupported op ${s?.op}` };
  }
  const last = steps[steps.length - 1].op;
  for (const [k, s] of steps.entries()) {
    const terminal = TEXT_ONLY.has(s.op) || ENDPOINTS.has(s.op);
    if (k > 0 && terminal !== (k === steps.length - 1)) return { ok: false, why: 'malformed case' };
  }

  const cap = captureFetch();
  const db = sdk.connect('http://capture.invalid', { fetch: cap.fetch });
  let got;
  try {
    const args0 = (steps[0].args ?? []).map(decode);
    let q = ENDPOINTS.has(last) ? db.from(...args0) : sdk.from(...args0);
    for (const s of steps.slice(1, -1)) q = q[s.op](...(s.args ?? []).map(decode));
    const args = (steps[steps.length - 1].args ?? []).map(decode);
    if (TEXT_ONLY.has(last)) {
      const [text, params] = q[last](...args);
      got = { text, params: JSON.stringify(params) };
    } else {
      await q[last](...args);
      if (cap.sent.length !== 1) return { ok: false, why: `one statement sent / ${cap.sent.length}` };
      got = { text: cap.sent[0].text, params: JSON.stringify(JSON.parse(cap.sent[0].body).params), headers: cap.sent[0].headers };
    }
  } catch (e) {
    if (e instanceof CaseFailure) return { ok: false, why: e.message };
    const builder = e instanceof sdk.FenecError && e.status === undefined;
    if (!('error' in c)) return { ok: false, why: `${JSON.stringify(c.text)} / ${builder ? 'refused' : 'threw'}: ${e.message}` };
    if (!builder) return { ok: false, why: `the builder error ${JSON.stringify(c.error)} / ${e}` };
    if (cap.sent.length !== 0) return { ok: false, why: 'a refusal sends nothing / it sent' };
    if (e.message !== c.error) return { ok: false, why: `${JSON.stringify(c.error)} / ${JSON.stringify(e.message)}` };
    return { ok: true };
  }
  if ('error' in c) return { ok: false, why: `the refusal ${JSON.stringify(c.error)} / ${JSON.stringify(got.text)} ${got.params}` };
  if (got.text !== c.text) return { ok: false, why: `${JSON.stringify(c.text)} / ${JSON.stringify(got.text)}` };
  const d = differ(expectedParams ?? [], parseKinds(got.params));
  if (d) return { ok: false, why: `params ${show(expectedParams)} / ${got.params}: ${d}` };
  if (c.headers && typeof c.headers === 'object') {
    for (const [name, value] of Object.entries(c.headers)) {
      const have = got.headers?.[name.toLowerCase()];
      if (have !== value) return { ok: false, why: `header ${name}: ${JSON.stringify(value)} / ${JSON.stringify(have ?? null)}` };
    }
  }
  return { ok: true };
}

/**
 * Runs a vectors file. Prints one line per case and the tally; returns {passed, failed}, with
 * `failed` counting one more when the file cannot be read, parsed, holds no case or fewer than
 * `minCases`.
 */
export async function runVectors(file, { only, minCases = 1, log = console.log } = {}) {
  let cases;
  let kinds;
  try {
    const text = readFileSync(file, 'utf8');
    cases = JSON.parse(text);
    kinds = parseKinds(text);
    if (!Array.isArray(cases)) throw new Error('a vectors file is a JSON array of cases');
  } catch (e) {
    log(`FAIL vectors ${file}: cannot read it: ${e.message}`);
    log(`vectors ${file}: 0 ok, 1 FAIL, 0 checked-elsewhere`);
    return { passed: 0, failed: 1 };
  }
  let passed = 0;
  let failed = 0;
  let ran = 0;
  const names = new Set();
  for (const [k, c] of cases.entries()) {
    const name = typeof c?.name === 'string' ? c.name : `#${k}`;
    if (only && !name.includes(only)) continue;
    ran++;
    let r;
    if (names.has(name)) r = { ok: false, why: 'the name is used twice in the file' };
    else r = await runCase(c, kinds[k].get('params'));
    names.add(name);
    if (r.ok) {
      passed++;
      log(`ok ${name}`);
    } else {
      failed++;
      log(`FAIL ${name}: ${r.why}`);
    }
  }
  if (cases.length === 0) {
    log(`FAIL vectors ${file}: the file holds no case`);
    failed++;
  } else if (!only && cases.length < minCases) {
    log(`FAIL vectors ${file}: ${cases.length} cases, fewer than the ${minCases} expected`);
    failed++;
  } else if (only && ran === 0) {
    log(`vectors ${file}: no case name contains ${JSON.stringify(only)}`);
  }
  log(`vectors ${file}: ${passed} ok, ${failed} FAIL, 0 checked-elsewhere`);
  return { passed, failed };
}
