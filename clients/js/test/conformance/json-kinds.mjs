// A JSON reader that keeps integers and floats apart (conformance.md A.5): JavaScript's
// JSON.parse reads `1` and `1.0` alike, so parameters are compared on this reader's output.
// Numbers come back as {int: bigint} or {float: number}; everything else as JSON.parse would.
export function parseKinds(text) {
  let i = 0;
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i])) i++;
  };
  const value = () => {
    ws();
    const ch = text[i];
    if (ch === '{') {
      i++;
      const out = new Map();
      ws();
      if (text[i] === '}') { i++; return out; }
      for (;;) {
        ws();
        const k = string();
        ws();
        if (text[i++] !== ':') throw new SyntaxError(`expected : at ${i}`);
        out.set(k, value());
        ws();
        const sep = text[i++];
        if (sep === '}') return out;
        if (sep !== ',') throw new SyntaxError(`expected , or } at ${i}`);
      }
    }
    if (ch === '[') {
      i++;
      const out = [];
      ws();
      if (text[i] === ']') { i++; return out; }
      for (;;) {
        out.push(value());
        ws();
        const sep = text[i++];
        if (sep === ']') return out;
        if (sep !== ',') throw new SyntaxError(`expected , or ] at ${i}`);
      }
    }
    if (ch === '"') return string();
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i, i + 400));
    if (m && m[0] !== '' && m[0] !== '-') {
      i += m[0].length;
      return m[2] || m[3] ? { float: Number(m[0]) } : { int: BigInt(m[0]) };
    }
    for (const [word, v] of [['true', true], ['false', false], ['null', null]]) {
      if (text.startsWith(word, i)) { i += word.length; return v; }
    }
    throw new SyntaxError(`unexpected ${JSON.stringify(text.slice(i, i + 10))} at ${i}`);
  };
  const string = () => {
    const m = /^"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/.exec(text.slice(i));
    if (!m) throw new SyntaxError(`bad string at ${i}`);
    i += m[0].length;
    return JSON.parse(m[0]);
  };
  const v = value();
  ws();
  if (i !== text.length) throw new SyntaxError(`text after the value at ${i}`);
  return v;
}

const isNum = (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Map);

/** Compares an expected value with a got one, both from parseKinds; returns null or where they differ. */
export function differ(expected, got, path = '$') {
  if (isNum(expected)) {
    if (!isNum(got)) return `${path}: a number / ${show(got)}`;
    if ('int' in expected) {
      if (!('int' in got)) return `${path}: the integer ${expected.int} / the float ${got.float}`;
      return expected.int === got.int ? null : `${path}: ${expected.int} / ${got.int}`;
    }
    const g = 'int' in got ? Number(got.int) : got.float;
    return expected.float === g ? null : `${path}: ${expected.float} / ${g}`;
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(got)) return `${path}: a list / ${show(got)}`;
    if (expected.length !== got.length) return `${path}: ${expected.length} items / ${got.length}`;
    for (let k = 0; k < expected.length; k++) {
      const d = differ(expected[k], got[k], `${path}[${k}]`);
      if (d) return d;
    }
    return null;
  }
  if (expected instanceof Map) {
    if (!(got instanceof Map)) return `${path}: a map / ${show(got)}`;
    if (expected.size !== got.size) return `${path}: ${expected.size} keys / ${got.size}`;
    for (const [k, v] of expected) {
      if (!got.has(k)) return `${path}: key ${JSON.stringify(k)} missing`;
      const d = differ(v, got.get(k), `${path}.${k}`);
      if (d) return d;
    }
    return null;
  }
  return expected === got ? null : `${path}: ${show(expected)} / ${show(got)}`;
}

/** The JSON text of a parseKinds value, for reports. */
export function show(v) {
  if (isNum(v)) return 'int' in v ? String(v.int) : Number.isInteger(v.float) ? `${v.float}.0` : String(v.float);
  if (Array.isArray(v)) return `[${v.map(show).join(', ')}]`;
  if (v instanceof Map) return `{${[...v].map(([k, x]) => `${JSON.stringify(k)}: ${show(x)}`).join(', ')}}`;
  return JSON.stringify(v);
}
