// Every example of the text rules (clients.md §5, R1–R22), written as the JavaScript calls the
// spec gives, with the text and parameters (or the refusal) the spec gives for them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import * as sdk from '@fenecdb/web/client';
import { captureFetch } from './capture.mjs';

const cases = JSON.parse(readFileSync(new URL('./testdata/spec-examples.json', import.meta.url), 'utf8'));

test('the spec examples file holds every table row', () => {
  assert.ok(cases.length >= 50, `only ${cases.length} examples`);
});

for (const c of cases) {
  test(c.calls, async () => {
    const cap = captureFetch();
    const db = sdk.connect('http://capture.invalid', { fetch: cap.fetch });
    const scope = { ...sdk, from: (name) => db.from(name) };
    const run = new Function(...Object.keys(scope), `return ${c.calls};`);
    let got;
    try {
      const value = run(...Object.values(scope));
      if (value instanceof sdk.Query) got = value.toFenecQL();
      else {
        await value;
        assert.equal(cap.sent.length, 1, 'an endpoint sends exactly one statement');
        got = [cap.sent[0].text, cap.sent[0].params];
      }
    } catch (e) {
      if (!('error' in c)) throw e;
      assert.ok(e instanceof sdk.FenecError, `a FenecError, not ${e}`);
      assert.equal(e.status, undefined, 'a builder refusal has no status');
      assert.equal(e.message, c.error);
      assert.equal(cap.sent.length, 0, 'a refusal sends nothing');
      return;
    }
    assert.ok(!('error' in c), `expected the refusal ${c.error}, got ${JSON.stringify(got)}`);
    assert.equal(got[0], c.text);
    assert.deepEqual(got[1], c.params);
  });
}
