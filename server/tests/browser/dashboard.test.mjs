// The dashboard as a person uses it: headless Chromium (the system's) opens /_dashboard on a real
// fenec-server, and the test clicks through the counts, a job's detail and a resend, then tries
// the same resend under a read-only token and sees the refusal. Screenshots go to artifacts/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, '../../..');
const SERVER = process.env.FENEC_SERVER || join(ROOT, '.venv/bin/fenec-server');
const CHROMIUM = process.env.FENEC_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = join(HERE, 'artifacts');
const TOKEN = 'dashboard-test-server-token';
const DEADLINE = 30_000;

let child;
let base;
let browser;
let viewer;

async function q(text, params = [], token = TOKEN) {
  const r = await fetch(`${base}/query`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ query: text, params }),
  });
  const doc = await r.json();
  if (!r.ok) throw new Error(`${r.status} ${doc.error}`);
  return doc;
}

function startServer(dir) {
  writeFileSync(join(dir, 'jwt.secret'), 'a-secret-of-at-least-thirty-two-bytes-for-hs256\n');
  writeFileSync(join(dir, 'policy'), '*  read  for viewer\n');
  viewer = execFileSync(SERVER, ['--jwt-secret-file', join(dir, 'jwt.secret'), '--mint-token',
    '{"sub":"ana","role":"viewer"}']).toString().trim();
  child = spawn(SERVER, ['--http', '127.0.0.1:0', '--file', join(dir, 'd.fenec'), '--jwt-secret-file',
    join(dir, 'jwt.secret'), '--policy', join(dir, 'policy'), '--auth-delay', '0'],
  { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, FENEC_HTTP_TOKEN: TOKEN } });
  return new Promise((ok, fail) => {
    let log = '';
    const timer = setTimeout(() => fail(new Error(`no server: ${log}`)), DEADLINE);
    child.stderr.on('data', (chunk) => {
      log += chunk;
      const m = /listening on: (http:\/\/\S+)/.exec(log);
      if (m && !base) { base = m[1]; clearTimeout(timer); ok(); }
    });
    child.on('exit', (code) => fail(new Error(`server exited ${code}: ${log}`)));
  });
}

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  await startServer(mkdtempSync(join(tmpdir(), 'fenec-dash-')));
  await q('create collection jobs (queue text, payload json, run_at timestamp @sorted, owner text, ' +
    'attempts int, error text, done_at timestamp)');
  await q('put jobs [{queue: "mail", payload: {"to": "ada@example.com"}, run_at: now() - 4000, attempts: 0}, ' +
    '{queue: "mail", payload: {"to": "bo@example.com"}, run_at: now(), attempts: 0}, ' +
    '{queue: "mail", payload: {"to": "cy@example.com"}, run_at: now() + 600000, attempts: 0}, ' +
    '{queue: "mail", payload: {"to": "di@example.com"}, run_at: now() + 600000, attempts: 2, error: "smtp 451"}, ' +
    '{queue: "mail", payload: {"to": "ed@example.com"}, run_at: null, attempts: 5, error: "smtp timeout"}, ' +
    '{queue: "mail", payload: {"to": "fa@example.com"}, run_at: null, done_at: now(), attempts: 1}, ' +
    '{queue: "image", payload: {"w": 640}, run_at: null, attempts: 5, error: "bad png"}, ' +
    '{queue: "image", payload: {"w": 320}, run_at: now() + 3600000, owner: "w9", attempts: 1}]');
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
});

after(async () => {
  if (browser) await browser.close();
  if (child) child.kill('SIGTERM');
});

async function loaded(page, since) {
  await page.waitForFunction((t) => Number(document.body.dataset.loaded || 0) > t, since, { timeout: DEADLINE });
}

async function counts(page, queue) {
  const row = page.locator(`#queues tbody tr[data-collection="jobs"][data-queue="${queue}"]`);
  const out = {};
  for (const s of ['ready', 'leased', 'delayed', 'retrying', 'dead', 'done']) {
    out[s] = Number(await row.locator(`button[data-state="${s}"]`).textContent());
  }
  return out;
}

async function useToken(page, token) {
  const since = await page.evaluate(() => Number(document.body.dataset.loaded || 0));
  await page.fill('#token', token);
  await page.click('#use-token');
  await loaded(page, since);
}

test('the dashboard: counts, a job, a resend, and a read-only token refused', async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  const outside = [];
  page.on('request', (r) => { if (!r.url().startsWith(base)) outside.push(r.url()); });
  await page.goto(`${base}/_dashboard?every=0`);
  await loaded(page, 0);

  // no token: nothing is shown but the refusal
  assert.equal(await page.textContent('#who'), 'a token is needed');
  assert.equal(await page.locator('#queues tbody tr').count(), 0);
  assert.match(await page.textContent('#notice'), /invalid or missing token/);
  await page.screenshot({ path: join(ARTIFACTS, '01-no-token.png'), fullPage: true });

  // the server token: every queue value's counts
  await useToken(page, TOKEN);
  assert.equal(await page.textContent('#who'), 'full access');
  assert.deepEqual(await counts(page, 'mail'), { ready: 2, leased: 0, delayed: 2, retrying: 1, dead: 1, done: 1 });
  assert.deepEqual(await counts(page, 'image'), { ready: 0, leased: 1, delayed: 0, retrying: 0, dead: 1, done: 0 });
  const oldest = await page.textContent('#queues tr[data-queue="mail"] td.oldest');
  assert.match(oldest, /^\d+\.\d s$/);
  assert.ok(Number.parseFloat(oldest) >= 4, oldest);
  assert.equal(await page.textContent('#queues tr[data-queue="image"] td.oldest'), '–');
  await page.screenshot({ path: join(ARTIFACTS, '02-counts.png'), fullPage: true });

  // the dead letters of mail, one of them opened
  await page.click('#queues tr[data-queue="mail"] button[data-state="dead"]');
  await page.waitForSelector('#jobs tbody tr[data-id]');
  assert.equal(await page.locator('#jobs tbody tr[data-id]').count(), 1);
  assert.equal(await page.textContent('#jobs-title'), 'dead jobs in jobs · mail');
  assert.ok(await page.isVisible('#resend-all'));
  await page.click('#jobs tbody tr[data-id]');
  await page.waitForSelector('#detail-panel:not([hidden])');
  assert.equal(await page.textContent('#detail dd[data-fact="error"]'), 'smtp timeout');
  assert.equal(await page.textContent('#detail dd[data-fact="attempts"]'), '5');
  assert.equal(await page.textContent('#detail dd[data-fact="state"]'), 'dead');
  assert.deepEqual(JSON.parse(await page.textContent('#detail-payload')), { to: 'ed@example.com' });
  await page.screenshot({ path: join(ARTIFACTS, '03-dead-letter.png'), fullPage: true });
  const id = Number(await page.getAttribute('#jobs tbody tr[data-id]', 'data-id'));

  // resend it: ready again, attempts and error cleared, as the server says
  let since = await page.evaluate(() => Number(document.body.dataset.loaded));
  await page.click('#resend-one');
  await loaded(page, since);
  assert.match(await page.textContent('#notice'), new RegExp(`resent job ${id}: 1 job`));
  const [job] = await q('get jobs where id = $1', [id]);
  assert.equal(job.attempts, 0);
  assert.equal(job.error, null);
  assert.ok(job.run_at !== null);
  const after = await counts(page, 'mail');
  assert.equal(after.dead, 0);
  assert.equal(after.ready, 3);
  assert.equal(await page.locator('#jobs tbody tr[data-id]').count(), 0);
  assert.equal(await page.textContent('#jobs td.none'), 'no dead job');
  await page.screenshot({ path: join(ARTIFACTS, '04-resent.png'), fullPage: true });

  // a leased job's detail shows its owner and lease end
  await page.click('#queues tr[data-queue="image"] button[data-state="leased"]');
  await page.waitForSelector('#jobs tbody tr[data-id]');
  await page.click('#jobs tbody tr[data-id]');
  await page.waitForFunction(() => document.querySelector('#detail dd[data-fact="owner"]')?.textContent === 'w9');
  await page.waitForSelector('#detail dd[data-fact="lease ends"]');
  assert.match(await page.textContent('#detail dd[data-fact="lease ends"]'), /^\d{4}-\d\d-\d\dT/);
  assert.ok(!(await page.isVisible('#resend-one')));

  // throughput: claims and acks made now show up in the rates (averaged over the last 10 s of
  // samples, so each look follows a claim and an ack of its own, however slow the machine)
  const claimed = await q('set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} ' +
    'where run_at <= now() order run_at limit 10 returning id', ['w1']);
  assert.equal(claimed.length, 3);
  for (const j of claimed) await q('del jobs where id = $1 and owner = $2 require 1', [j.id, 'w1']);
  const until = Date.now() + DEADLINE;
  let rate = 0;
  while (Date.now() < until) {
    await q('put jobs {queue: "bulk", payload: {}, run_at: now(), attempts: 0}');
    const [j] = await q('set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} ' +
      'where queue = "bulk" and run_at <= now() order run_at limit 1 returning id', ['w2']);
    await q('del jobs where id = $1 and owner = $2 require 1', [j.id, 'w2']);
    since = await page.evaluate(() => Number(document.body.dataset.loaded));
    await page.click('#refresh');
    await loaded(page, since);
    rate = Number(await page.textContent('#acks-rate'));
    if (rate > 0 && Number(await page.textContent('#claims-rate')) > 0) break;
    await page.waitForTimeout(500);
  }
  assert.ok(rate > 0, 'the acks rate never rose');
  assert.equal(await page.locator('#rates-chart polyline').count(), 2);
  await page.screenshot({ path: join(ARTIFACTS, '05-rates.png'), fullPage: true });

  // a token that may only read: the counts, and a resend refused with the server's answer
  await useToken(page, viewer);
  assert.match(await page.textContent('#who'), /token of ana/);
  assert.ok(await page.isVisible('#rates-off'));
  assert.equal((await counts(page, 'image')).dead, 1);
  await page.click('#queues tr[data-queue="image"] button[data-state="dead"]');
  await page.waitForSelector('#jobs tbody tr[data-id]');
  await page.click('#jobs tbody tr[data-id]');
  await page.waitForSelector('#resend-one:visible');
  since = await page.evaluate(() => Number(document.body.dataset.loaded));
  await page.click('#resend-one');
  await loaded(page, since);
  assert.match(await page.textContent('#notice'), /refused: .*\(403\)/);
  const [still] = await q('get jobs where queue = "image" and run_at is null');
  assert.equal(still.attempts, 5);
  assert.equal((await counts(page, 'image')).dead, 1);
  await page.screenshot({ path: join(ARTIFACTS, '06-read-only-refused.png'), fullPage: true });

  // back to the server token: every dead letter of a queue, at once, after a confirmation
  await q('put jobs [{queue: "image", payload: {}, run_at: null, attempts: 5, error: "x"}, ' +
    '{queue: "mail", payload: {}, run_at: null, attempts: 5, error: "y"}]');
  await useToken(page, TOKEN);
  await page.click('#queues tr[data-queue="image"] button[data-state="dead"]');
  await page.waitForFunction(() => document.querySelectorAll('#jobs tbody tr[data-id]').length === 2);
  page.once('dialog', (d) => d.dismiss());
  await page.click('#delete-all');
  assert.equal((await q('get jobs where queue = "image" and run_at is null count'))[0].count, 2);
  page.once('dialog', (d) => { assert.match(d.message(), /Delete every dead letter of jobs · image/); d.accept(); });
  since = await page.evaluate(() => Number(document.body.dataset.loaded));
  await page.click('#delete-all');
  await loaded(page, since);
  assert.match(await page.textContent('#notice'), /deleted all matching: 2 job/);
  assert.equal((await q('get jobs where queue = "image" and run_at is null count'))[0].count, 0);
  assert.equal((await q('get jobs where queue = "mail" and run_at is null and done_at is null count'))[0].count, 1);
  assert.equal((await counts(page, 'image')).dead, 0);
  await page.screenshot({ path: join(ARTIFACTS, '07-deleted-all.png'), fullPage: true });

  assert.deepEqual(outside, [], 'the page asked nothing of any other address');
  await context.close();
});
