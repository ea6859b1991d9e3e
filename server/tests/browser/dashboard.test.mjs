// The dashboard as a person uses it: headless Chromium (the system's) opens /_dashboard on a real
// fenec-server, and the test clicks through the counts (retrying marked as a part of ready and
// delayed), the job lists (their times relative to now, ages and payloads), a job's detail, a
// resend, the per-queue rates and the throughput chart's axes, then tries the same resend under a
// read-only token and sees the refusal. Screenshots go to artifacts/.
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
    'attempts int, error text, done_at timestamp, enqueued_at timestamp)');
  await q('put jobs [{queue: "mail", payload: {"to": "ada@example.com"}, run_at: now() - 4000, attempts: 0}, ' +
    '{queue: "mail", payload: {"to": "bo@example.com"}, run_at: now(), attempts: 0}, ' +
    '{queue: "mail", payload: {"to": "cy@example.com"}, run_at: now() + 600000, attempts: 0, ' +
    'enqueued_at: now() - 7200000}, ' +
    '{queue: "mail", payload: {"to": "di@example.com"}, run_at: now() + 600000, attempts: 2, error: "smtp 451"}, ' +
    '{queue: "mail", payload: {"to": "ed@example.com"}, run_at: null, attempts: 5, error: "smtp timeout"}, ' +
    '{queue: "mail", payload: {"to": "fa@example.com"}, run_at: null, done_at: now(), attempts: 1}, ' +
    '{queue: "image", payload: {"w": 640}, run_at: null, attempts: 5, error: "bad png"}, ' +
    '{queue: "image", payload: {"w": 320}, run_at: now() + 3600000, owner: "w9", attempts: 1}]');
  // a collection of one queue with no enqueue time: a lease that ran out two minutes ago, and a
  // payload too long for the list
  await q('create collection tasks (payload json, run_at timestamp @sorted, owner text, attempts int)');
  await q('put tasks [{payload: {"report": "weekly"}, run_at: now() - 120000, owner: "w7", attempts: 1}, ' +
    '{payload: $1, run_at: now() + 600000, attempts: 0}]', [{ text: 'x'.repeat(200) }]);
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

async function refreshed(page) {
  const since = await page.evaluate(() => Number(document.body.dataset.loaded));
  await page.click('#refresh');
  await loaded(page, since);
}

// the jobs of one count, listed: [{heading: text of each cell}] once the list shows `state`
async function list(page, row, state) {
  await page.click(`#queues ${row} button[data-state="${state}"]`);
  await page.waitForFunction((s) => document.querySelector('#jobs-title')?.textContent.startsWith(`${s} jobs`),
    state);
  return page.evaluate(() => {
    const heads = [...document.querySelectorAll('#jobs thead th')].map((th) => th.textContent);
    return [...document.querySelectorAll('#jobs tbody tr[data-id]')].map((tr) => Object.fromEntries(
      [...tr.cells].map((td, i) => [heads[i], { text: td.textContent, title: td.title }])));
  });
}

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/;

async function useToken(page, token) {
  const since = await page.evaluate(() => Number(document.body.dataset.loaded || 0));
  await page.fill('#token', token);
  await page.click('#use-token');
  await loaded(page, since);
}

test('the dashboard: counts, job lists, a job, a resend, the rates, and a read-only token refused', async () => {
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
  // a collection's queues added up, and a collection with no `queue` field in one row
  const total = 'tr.total[data-collection="jobs"]';
  assert.equal(await page.textContent(`#queues ${total} td:nth-child(2)`), 'all');
  assert.equal(Number(await page.textContent(`#queues ${total} button[data-state="dead"]`)), 2);
  assert.equal(Number(await page.textContent(`#queues ${total} button[data-state="delayed"]`)), 2);
  const tasks = 'tr[data-collection="tasks"][data-queue=""]';
  assert.equal(Number(await page.textContent(`#queues ${tasks} button[data-state="ready"]`)), 1);
  assert.equal(await page.locator('#queues tr.total[data-collection="tasks"]').count(), 0);
  // retrying is marked as a part of ready and delayed, and says what it is
  const retrying = page.locator('#queues th[data-state="retrying"]');
  assert.equal(await retrying.locator('small').textContent(), 'of ready + delayed');
  assert.match(await retrying.getAttribute('title'), /failed before.*already counted in ready or delayed/);
  assert.match(await page.textContent('#queues-note'), /retrying.*already in ready or delayed/s);
  assert.ok(await page.isVisible('#queues-note'));
  // every queue row has its own rates
  for (const k of ['enqueued', 'claimed', 'acked']) {
    assert.match(await page.textContent(`#queues tr[data-queue="mail"] td[data-rate="${k}"]`), /^\d+(\.\d+)?$/);
  }
  await page.screenshot({ path: join(ARTIFACTS, '02-counts.png'), fullPage: true });

  // the dead letters of mail, one of them opened
  const dead = await list(page, 'tr[data-queue="mail"]', 'dead');
  assert.equal(dead.length, 1);
  assert.equal(await page.textContent('#jobs-title'), 'dead jobs in jobs · mail');
  assert.deepEqual(await page.$$eval('#jobs thead th', (ths) => ths.map((th) => th.textContent)),
    ['id', 'queue', 'attempts', 'age (since enqueued_at)', 'payload', 'error']);
  assert.equal(dead[0].payload.text, '{"to":"ed@example.com"}');
  assert.equal(dead[0].error.text, 'smtp timeout');
  assert.ok(await page.isVisible('#resend-all'));
  await page.click('#jobs tbody tr[data-id]');
  await page.waitForSelector('#detail-panel:not([hidden])');
  assert.equal(await page.textContent('#detail dd[data-fact="error"] .value'), 'smtp timeout');
  assert.equal(await page.textContent('#detail dd[data-fact="attempts"] .value'), '5');
  assert.equal(await page.textContent('#detail dd[data-fact="state"] .value'), 'dead');
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

  // a leased job: when its lease ends, relative to now, the ISO time in the tooltip and the detail
  const leased = await list(page, 'tr[data-queue="image"]', 'leased');
  assert.equal(leased.length, 1);
  assert.match(leased[0]['lease ends'].text, /^in (59|60) min$/);
  assert.match(leased[0]['lease ends'].title, ISO);
  assert.equal(leased[0].owner.text, 'w9');
  assert.equal(leased[0]['age (since enqueued_at)'].text, '–');
  await page.click('#jobs tbody tr[data-id]');
  await page.waitForFunction(() => document.querySelector('#detail dd[data-fact="owner"]')?.textContent === 'w9');
  assert.match(await page.textContent('#detail dd[data-fact="lease ends"] .value'), /^in (59|60) min$/);
  assert.match(await page.getAttribute('#detail dd[data-fact="lease ends"]', 'title'), ISO);
  assert.match(await page.textContent('#detail dd[data-fact="lease ends"] .iso'), ISO);
  assert.ok(!(await page.isVisible('#resend-one')));
  await page.screenshot({ path: join(ARTIFACTS, '05-leased.png'), fullPage: true });

  // delayed jobs are due in a while; the one enqueued two hours ago says so
  const delayed = await list(page, 'tr[data-queue="mail"]', 'delayed');
  assert.equal(delayed.length, 2);
  for (const job of delayed) assert.match(job.due.text, /^in (9|10) min$/);
  assert.deepEqual(delayed.map((j) => j['age (since enqueued_at)'].text).sort(), ['2.0 h', '–']);
  assert.ok(delayed.some((j) => j.error.text === 'smtp 451'));

  // the retrying ones: the job that failed and waits for its next try
  const again = await list(page, 'tr[data-queue="mail"]', 'retrying');
  assert.equal(again.length, 1);
  assert.match(again[0]['next try'].text, /^in (9|10) min$/);
  await page.click('#jobs tbody tr[data-id]');
  await page.waitForFunction(() => /retrying/.test(document.querySelector('#detail dd[data-fact="state"]')?.textContent));
  assert.match(await page.textContent('#detail dd[data-fact="state"] .value'), /^delayed · retrying/);

  // a collection with no enqueue time: ages since the ready time, and a lease that ran out is ready
  const ready = await list(page, 'tr[data-collection="tasks"]', 'ready');
  assert.equal(ready.length, 1);
  assert.match(ready[0]['ready since'].text, /^lease lapsed [23] min ago$/);
  assert.match(ready[0]['age (since run_at)'].text, /^[23] min$/);
  assert.equal(ready[0].payload.text, '{"report":"weekly"}');
  const waiting = await list(page, 'tr[data-collection="tasks"]', 'delayed');
  assert.equal(waiting[0].payload.text.length, 60);
  assert.ok(waiting[0].payload.text.endsWith('…'));
  assert.equal(waiting[0]['age (since run_at)'].text, '–');
  await page.click('#jobs tbody tr[data-id]');
  await page.waitForFunction(() => document.querySelector('#detail-title')?.textContent.startsWith('Job 2 in tasks'));
  assert.deepEqual(JSON.parse(await page.textContent('#detail-payload')), { text: 'x'.repeat(200) });
  await page.screenshot({ path: join(ARTIFACTS, '06-tasks.png'), fullPage: true });

  // throughput: claims and acks made now show up in the rates (averaged over the last 10 s of
  // samples, so each look follows a claim and an ack of its own, however slow the machine)
  // (and per queue over about the last minute: the bulk queue's work is in its row and the
  // collection's, none of it in image's)
  const claimed = await q('set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} ' +
    'where run_at <= now() order run_at limit 10 returning id', ['w1']);
  assert.equal(claimed.length, 3);
  for (const j of claimed) await q('del jobs where id = $1 and owner = $2 require 1', [j.id, 'w1']);
  const until = Date.now() + DEADLINE;
  const bulk = (k) => page.textContent(`#queues tr[data-queue="bulk"] td[data-rate="${k}"]`);
  const rose = async () => Number(await page.textContent('#acks-rate')) > 0 &&
    Number(await page.textContent('#claims-rate')) > 0 &&
    await page.locator('#queues tr[data-queue="bulk"]').count() === 1 && Number(await bulk('acked')) > 0 &&
    Number(await page.textContent(`#queues ${tasks} td[data-rate="enqueued"]`)) > 0;
  let up = false;
  while (Date.now() < until) {
    await q('put jobs {queue: "bulk", payload: {}, run_at: now(), attempts: 0}');
    await q('put tasks {payload: {}, run_at: now() + 600000, attempts: 0}');
    const [j] = await q('set jobs {owner: $1, run_at: now() + 30000, attempts: attempts + 1} ' +
      'where queue = "bulk" and run_at <= now() order run_at limit 1 returning id', ['w2']);
    await q('del jobs where id = $1 and owner = $2 require 1', [j.id, 'w2']);
    await refreshed(page);
    up = await rose();
    if (up) break;
    await page.waitForTimeout(500);
  }
  assert.ok(up, 'the rates never rose');
  // the bulk queue has no job left: its row is there for its rates alone
  assert.equal(Number(await page.textContent('#queues tr[data-queue="bulk"] button[data-state="ready"]')), 0);
  assert.equal(await page.textContent('#queues tr[data-queue="image"] td[data-rate="acked"]'), '0');
  assert.ok(Number(await page.textContent(`#queues ${total} td[data-rate="acked"]`)) >= Number(await bulk('acked')));
  assert.match(await page.getAttribute(`#queues ${total} td[data-rate="acked"]`, 'title'), /per second, over the last \d+ s/);
  // the chart: a line per series named in the legend, a value axis in jobs/s, a time axis
  assert.equal(await page.locator('#rates-chart polyline').count(), 3);
  assert.deepEqual(await page.$$eval('#legend .key', (ks) => ks.map((k) => k.className)),
    ['key enqueued', 'key claimed', 'key acked']);
  assert.equal(await page.textContent('#rates-chart text.unit'), 'jobs/s');
  const yTicks = await page.$$eval('#rates-chart text.tick.y', (ts) => ts.map((t) => Number(t.textContent)));
  assert.equal(yTicks.length, 5);
  assert.equal(yTicks[0], 0);
  assert.ok(yTicks[4] >= Number(await page.textContent('#acks-rate')), `${yTicks}`);
  const xTicks = await page.$$eval('#rates-chart text.tick.x', (ts) => ts.map((t) => t.textContent));
  assert.equal(xTicks[0], 'now');
  assert.ok(xTicks.includes('−1 min'), `${xTicks}`);
  assert.match(await page.textContent('#rates-chart text.title'), /^time: the last \d+ min, up to \d\d:\d\d:\d\d/);
  await page.screenshot({ path: join(ARTIFACTS, '07-rates.png'), fullPage: true });

  // pause the mail queue: its row says so, the server agrees, and a claim takes none of its jobs
  const mailControl = '#queues tr[data-queue="mail"] td.control';
  assert.equal(await page.textContent(`${mailControl} button.switch`), 'Pause');
  since = await page.evaluate(() => Number(document.body.dataset.loaded));
  await page.click(`${mailControl} button.switch`);
  await loaded(page, since);
  assert.match(await page.textContent('#notice'), /queue jobs "mail" paused/);
  assert.equal(await page.getAttribute(mailControl, 'data-paused'), 'true');
  assert.equal(await page.textContent(`${mailControl} button.switch`), 'Resume');
  assert.ok((await q('show queues')).some((r) => r.collection === 'jobs' && r.queue === 'mail' && r.paused));
  await q('put jobs {queue: "mail", payload: {}, run_at: now(), attempts: 0}');
  assert.deepEqual(await q('set jobs {owner: "w3", run_at: now() + 30000, attempts: attempts + 1} ' +
    'where queue = "mail" and run_at <= now() order run_at limit 5 returning id'), []);
  assert.equal(await page.getAttribute('#queues tr[data-queue="image"] td.control', 'data-paused'), 'false');
  await page.screenshot({ path: join(ARTIFACTS, '07b-paused.png'), fullPage: true });
  since = await page.evaluate(() => Number(document.body.dataset.loaded));
  await page.click(`${mailControl} button.switch`);
  await loaded(page, since);
  assert.match(await page.textContent('#notice'), /queue jobs "mail" resumed/);
  assert.equal(await page.getAttribute(mailControl, 'data-paused'), 'false');

  // a token that may only read: the counts, and a resend refused with the server's answer
  await useToken(page, viewer);
  assert.match(await page.textContent('#who'), /token of ana/);
  assert.ok(await page.isVisible('#rates-off'));
  assert.ok(!(await page.isVisible('#rates-chart')));
  assert.equal(await page.textContent('#queues tr[data-queue="mail"] td[data-rate="acked"]'), '–');
  assert.equal((await counts(page, 'image')).dead, 1);
  assert.equal((await list(page, 'tr[data-queue="image"]', 'dead')).length, 1);
  await page.click('#jobs tbody tr[data-id]');
  await page.waitForSelector('#resend-one:visible');
  since = await page.evaluate(() => Number(document.body.dataset.loaded));
  await page.click('#resend-one');
  await loaded(page, since);
  assert.match(await page.textContent('#notice'), /refused: .*\(403\)/);
  const [still] = await q('get jobs where queue = "image" and run_at is null');
  assert.equal(still.attempts, 5);
  assert.equal((await counts(page, 'image')).dead, 1);
  // nor may it pause a queue: that takes the `control` grant
  since = await page.evaluate(() => Number(document.body.dataset.loaded));
  await page.click('#queues tr[data-queue="image"] td.control button.switch');
  await loaded(page, since);
  assert.match(await page.textContent('#notice'), /refused: .*control.*\(403\)/);
  assert.ok(!(await q('show queues')).some((r) => r.paused));
  await page.screenshot({ path: join(ARTIFACTS, '08-read-only-refused.png'), fullPage: true });

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
  await page.screenshot({ path: join(ARTIFACTS, '09-deleted-all.png'), fullPage: true });

  assert.deepEqual(outside, [], 'the page asked nothing of any other address');
  await context.close();
});

test('schedules: listed with their next due time, paused, resumed and fired by hand', async () => {
  await q('create collection ticks (due timestamp, run_at timestamp @sorted, owner text, attempts int)');
  await q('create schedule nightly cron "0 3 * * *" in "Europe/Istanbul" put ticks {due: $1, run_at: now(), attempts: 0}');
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  await page.goto(`${base}/_dashboard?every=0`);
  await loaded(page, 0);
  await useToken(page, TOKEN);
  const row = '#schedules tbody tr[data-schedule="nightly"]';
  await page.waitForSelector(row);
  const cells = async () => page.$$eval(`${row} td`, (tds) => tds.map((td) => td.textContent));
  let c = await cells();
  assert.deepEqual(c.slice(0, 4), ['nightly', 'cron 0 3 * * *', 'Europe/Istanbul', 'ticks']);
  assert.match(c[4], /^in /);
  assert.equal(c[5], 'never');
  assert.equal(c[7], 'running');

  let since = await page.evaluate(() => Number(document.body.dataset.loaded));
  await page.click(`${row} button[data-verb="pause"]`);
  await loaded(page, since);
  c = await cells();
  assert.equal(c[7], 'paused');
  assert.equal((await q('show schedules'))[0].paused, true);

  since = await page.evaluate(() => Number(document.body.dataset.loaded));
  await page.click(`${row} button[data-verb="fire"]`);
  await loaded(page, since);
  assert.match(await page.textContent('#notice'), /schedule `nightly` fired/);
  assert.equal((await q('get ticks count'))[0].count, 1);
  assert.equal((await cells())[6], '1');

  since = await page.evaluate(() => Number(document.body.dataset.loaded));
  await page.click(`${row} button[data-verb="resume"]`);
  await loaded(page, since);
  assert.equal((await cells())[7], 'running');
  await page.screenshot({ path: join(ARTIFACTS, '10-schedules.png'), fullPage: true });
  await context.close();
});

// a fenec-server of its own (args, env added): its process and its URL once it listens
function spawnServer(args, env) {
  const proc = spawn(SERVER, ['--http', '127.0.0.1:0', ...args],
    { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, ...env } });
  return new Promise((ok, fail) => {
    let log = '';
    const timer = setTimeout(() => fail(new Error(`no server: ${log}`)), DEADLINE);
    proc.stderr.on('data', (chunk) => {
      log += chunk;
      const m = /listening on: (http:\/\/\S+)/.exec(log);
      if (m) { clearTimeout(timer); ok({ proc, url: m[1] }); }
    });
    proc.on('exit', (code) => fail(new Error(`server exited ${code}: ${log}`)));
  });
}

test('replication: the role, a replica\'s primary and lag, a primary\'s replicas sent and acked', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'fenec-dash-repl-'));
  const env = { FENEC_HTTP_TOKEN: TOKEN, FENEC_REPLICATION_TOKEN: 'dashboard-test-replication' };
  const servers = [];
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  try {
    const primary = await spawnServer(['--file', join(dir, 'p.fenec'), '--sync', 'always', '--sync-replicas', '1',
      '--sync-replicas-wait', '30', '--auth-delay', '0'], env);
    servers.push(primary.proc);
    const replica = await spawnServer(['--file', join(dir, 'r.fenec'), '--sync', 'always', '--replica-of',
      primary.url, '--auth-delay', '0'], env);
    servers.push(replica.proc);
    const put = async (text) => {
      const r = await fetch(`${primary.url}/query`, { method: 'POST', headers: { authorization: `Bearer ${TOKEN}` },
        body: JSON.stringify({ query: text }) });
      assert.equal(r.status, 200, await r.text());
      return Number(r.headers.get('fenec-seq'));
    };
    // the first write waits for the replica to connect and hold it (--sync-replicas 1)
    await put('create collection jobs (payload json, run_at timestamp @sorted, owner text, attempts int)');
    const seq = await put('put jobs {payload: 1, run_at: now(), attempts: 0}');

    const page = await context.newPage();
    await page.goto(`${primary.url}/_dashboard?every=0`);
    await loaded(page, 0);
    assert.equal(await page.isHidden('#replication-panel'), true); // no token yet: nothing shown
    await useToken(page, TOKEN);
    await page.waitForSelector('#replication-panel', { state: 'visible' });
    assert.equal(await page.textContent('#replication-role'), 'primary');
    assert.match(await page.textContent('#replication-of'), /once 1 replica\(s\) hold it/);
    const row = '#replicas tbody tr';
    assert.equal(await page.locator(row).count(), 1);
    const cell = async (field) => page.textContent(`${row} td[data-field="${field}"]`);
    assert.equal(Number(await cell('sent')), seq);
    assert.equal(Number(await cell('acked')), seq); // a sync replica: its disk holds the last write
    assert.equal(await cell('behind'), '0');
    await page.screenshot({ path: join(ARTIFACTS, '11-replication-primary.png'), fullPage: true });

    const other = await context.newPage();
    await other.goto(`${replica.url}/_dashboard?every=0`);
    await loaded(other, 0);
    await useToken(other, TOKEN);
    await other.waitForSelector('#replication-panel', { state: 'visible' });
    assert.equal(await other.textContent('#replication-role'), 'replica');
    assert.equal(await other.textContent('#replication-of'), ` of ${primary.url}`);
    assert.equal(await other.textContent('#replica-connected'), 'yes');
    assert.match(await other.textContent('#replica-behind'), /^0 changes, /);
    assert.equal(await other.isHidden('#replicas'), true);
    await other.screenshot({ path: join(ARTIFACTS, '12-replication-replica.png'), fullPage: true });
  } finally {
    await context.close();
    for (const proc of servers.reverse()) proc.kill('SIGTERM');
  }
});
