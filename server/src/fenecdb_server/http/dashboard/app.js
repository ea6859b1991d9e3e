// The FenecDB dashboard: one page, no framework, no build step. Every number and every action
// goes through the same routes and rules as any client (/query, /batch, /collections, /_whoami,
// /_metrics/recent) with the token pasted above, kept in sessionStorage for this tab only.
// A queue is found by its shape (engine/queues.py holds the same rule; docs/metrics.md states it).
'use strict';

const TOKEN_KEY = 'fenec.token';
const STATES = ['ready', 'leased', 'delayed', 'retrying', 'dead', 'done'];
const PAGE = 50;
const MAX_VALUES = 50; // distinct `queue` values listed per collection
const params = new URLSearchParams(location.search);
const EVERY_MS = params.has('every') ? Number(params.get('every')) * 1000 : 5000;

const $ = (id) => document.getElementById(id);
let queues = [];        // [{name, ready, done, error, queue}]
let view = null;        // {q, value, state} of the job list
let chosen = null;      // {q, id} of the detail
let fullAccess = false;

// ------------------------------------------------------------------ talking to the server

class Refused extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function headers() {
  const h = { 'content-type': 'application/json' };
  const t = sessionStorage.getItem(TOKEN_KEY);
  if (t) h.authorization = `Bearer ${t}`;
  return h;
}

async function call(method, path, body) {
  const r = await fetch(path, { method, headers: headers(), body, cache: 'no-store' });
  const text = await r.text();
  let doc = null;
  try { doc = text ? JSON.parse(text) : null; } catch { doc = null; }
  if (!r.ok) throw new Refused(r.status, (doc && doc.error) || `${r.status} ${r.statusText}`);
  return doc;
}

const query = (text, params = []) => call('POST', '/query', JSON.stringify({ query: text, params }));

async function batch(statements) {
  if (!statements.length) return [];
  const body = statements.map(([text, params]) => JSON.stringify({ query: text, params })).join('\n');
  const doc = await call('POST', '/batch', body);
  return doc.results.map((r) => r.rows);
}

function notice(message, isError) {
  const n = $('notice');
  n.textContent = message;
  n.className = isError ? 'error' : '';
  n.hidden = !message;
}

// ------------------------------------------------------------------ what a queue is, in FenecQL

function shapeOf(c) {
  const f = Object.fromEntries(c.fields.map((x) => [x.name, x]));
  if (!f.owner || f.owner.type !== 'text' || !f.attempts || f.attempts.type !== 'int') return null;
  let ready = null;
  if (f.run_at && f.run_at.type === 'timestamp') ready = 'run_at';
  else {
    const sorted = c.fields.filter((x) => x.type === 'timestamp' && x.index === 'sorted' && x.name !== 'done_at');
    if (sorted.length !== 1) return null;
    ready = sorted[0].name;
  }
  return {
    name: c.name, ready,
    done: f.done_at && f.done_at.type === 'timestamp' ? 'done_at' : null,
    error: f.error ? 'error' : null,
    queue: f.queue && f.queue.type === 'text' ? 'queue' : null,
  };
}

function stateFilter(q, state) {
  const r = q.ready;
  switch (state) {
    case 'ready': return `${r} <= now()`;
    case 'leased': return `${r} > now() and owner is not null`;
    case 'delayed': return `${r} > now() and owner is null`;
    case 'retrying':
      return q.error ? `${r} is not null and (${r} <= now() or owner is null) and attempts > 0 and error is not null`
        : 'false';
    case 'dead': return q.done ? `${r} is null and ${q.done} is null` : `${r} is null`;
    case 'done': return q.done ? `${r} is null and ${q.done} is not null` : 'false';
    default: throw new Error(state);
  }
}

// the filter of one queue value ($1 bound to it), or of the whole collection
function valueFilter(q, value) {
  if (!q.queue || value === undefined) return ['', []];
  if (value === null) return [` and ${q.queue} is null`, []];
  return [` and ${q.queue} = $1`, [value]];
}

async function queueValues(q) {
  if (!q.queue) return [undefined];
  const values = [];
  let last = '';
  const first = await batch([
    [`get ${q.name} where ${q.queue} is null limit 1 select id`, []],
    [`get ${q.name} where ${q.queue} >= $1 order ${q.queue} limit 1 select ${q.queue}`, ['']],
  ]);
  if (first[0].length) values.push(null);
  let next = first[1];
  while (next.length && values.length < MAX_VALUES) {
    last = next[0][q.queue];
    values.push(last);
    next = await query(`get ${q.name} where ${q.queue} > $1 order ${q.queue} limit 1 select ${q.queue}`, [last]);
  }
  return values;
}

// ------------------------------------------------------------------ the counts

async function loadQueues() {
  const collections = await call('GET', '/collections');
  queues = collections.map(shapeOf).filter(Boolean);
  const rows = [];
  for (const q of queues) {
    for (const value of await queueValues(q)) {
      const [where, params] = valueFilter(q, value);
      const statements = STATES.map((s) => [`get ${q.name} where ${stateFilter(q, s)}${where} count`, params]);
      statements.push([`get ${q.name} where ${q.ready} <= now()${where} order ${q.ready} limit 1 ` +
        `select now() - ${q.ready} as age`, params]);
      const answers = await batch(statements);
      const counts = Object.fromEntries(STATES.map((s, i) => [s, answers[i][0].count]));
      const oldest = answers[STATES.length].length ? answers[STATES.length][0].age : 0;
      rows.push({ q, value, counts, oldest });
    }
  }
  renderQueues(rows);
}

function age(ms) {
  if (!ms) return '–';
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function label(value) {
  if (value === undefined) return '';
  return value === null ? '(none)' : value;
}

function renderQueues(rows) {
  const body = $('queues').tBodies[0];
  body.replaceChildren();
  $('no-queues').hidden = rows.length > 0;
  for (const { q, value, counts, oldest } of rows) {
    const tr = body.insertRow();
    tr.dataset.collection = q.name;
    tr.dataset.queue = label(value);
    tr.insertCell().textContent = q.name;
    tr.insertCell().textContent = label(value);
    for (const s of STATES) {
      const td = tr.insertCell();
      td.className = 'n';
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = String(counts[s]);
      b.dataset.state = s;
      b.className = `${s}${counts[s] ? '' : ' zero'}`;
      b.title = `list the ${s} jobs`;
      b.addEventListener('click', () => { view = { q, value, state: s }; chosen = null; showJobs(); });
      td.append(b);
    }
    const td = tr.insertCell();
    td.className = 'n oldest';
    td.textContent = age(oldest);
  }
}

// ------------------------------------------------------------------ the job list and a job

async function showJobs() {
  if (!view) return;
  const { q, value, state } = view;
  const [where, params] = valueFilter(q, value);
  const order = state === 'ready' || state === 'delayed' || state === 'leased' ? q.ready : 'id';
  const rows = await query(`get ${q.name} where ${stateFilter(q, state)}${where} order ${order} limit ${PAGE + 1}`,
    params);
  $('jobs-panel').hidden = false;
  $('jobs-title').textContent = `${state} jobs in ${q.name}${value === undefined ? '' : ` · ${label(value)}`}`;
  $('bulk').hidden = state !== 'dead';
  $('jobs-more').hidden = rows.length <= PAGE;
  const body = $('jobs').tBodies[0];
  body.replaceChildren();
  if (!rows.length) {
    const td = body.insertRow().insertCell();
    td.colSpan = 6;
    td.className = 'muted none';
    td.textContent = `no ${state} job`;
  }
  for (const job of rows.slice(0, PAGE)) {
    const tr = body.insertRow();
    tr.dataset.id = String(job.id);
    if (chosen && chosen.id === job.id) tr.className = 'chosen';
    for (const v of [job.id, q.queue ? job[q.queue] : '', job.attempts, job.owner, job[q.ready]]) {
      tr.insertCell().textContent = v === null || v === undefined ? '' : String(v);
    }
    const err = tr.insertCell();
    err.className = 'err';
    err.textContent = q.error && job[q.error] != null ? String(job[q.error]) : '';
    tr.addEventListener('click', () => { chosen = { q, id: job.id }; showJob(); showJobs(); });
  }
}

async function showJob() {
  if (!chosen) { $('detail-panel').hidden = true; return; }
  const { q, id } = chosen;
  const rows = await query(`get ${q.name} where id = $1`, [id]);
  const panel = $('detail-panel');
  panel.hidden = false;
  $('detail-title').textContent = `Job ${id} in ${q.name}`;
  const dl = $('detail');
  dl.replaceChildren();
  if (!rows.length) {
    $('detail-payload').textContent = '';
    $('detail-actions').hidden = true;
    const dt = document.createElement('dt');
    dt.textContent = 'gone';
    dl.append(dt, document.createElement('dd'));
    return;
  }
  const job = rows[0];
  const now = Date.now();
  const readyAt = job[q.ready] ? Date.parse(job[q.ready]) : null;
  let state = 'dead';
  if (readyAt === null) state = q.done && job[q.done] ? 'done' : 'dead';
  else if (readyAt <= now) state = 'ready';
  else state = job.owner != null ? 'leased' : 'delayed';
  const facts = [
    ['state', state], ['attempts', job.attempts], ['error', q.error ? job[q.error] : null],
    ['owner', job.owner], [state === 'leased' ? 'lease ends' : 'ready time', job[q.ready]],
  ];
  if (q.queue) facts.splice(1, 0, ['queue', job[q.queue]]);
  if (q.done) facts.push(['done at', job[q.done]]);
  for (const [k, v] of facts) {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.textContent = v === null || v === undefined ? '–' : String(v);
    dd.dataset.fact = k;
    dl.append(dt, dd);
  }
  $('detail-payload').textContent = JSON.stringify(job.payload === undefined ? job : job.payload, null, 2);
  $('detail-actions').hidden = state !== 'dead';
}

// ------------------------------------------------------------------ dead letters

function resendPatch(q) {
  return `{${q.ready}: now(), attempts: 0${q.error ? `, ${q.error}: null` : ''}}`;
}

async function act(what, run) {
  try {
    const answer = await run();
    notice(`${what}: ${answer && answer.affected !== undefined ? answer.affected : 0} job(s)`, false);
  } catch (e) {
    notice(`${what} refused: ${e.message} (${e.status || 'network'})`, true);
  }
  await refresh();
}

function resendOne() {
  const { q, id } = chosen;
  return act(`resent job ${id}`, () => query(
    `set ${q.name} ${resendPatch(q)} where id = $1 and ${stateFilter(q, 'dead')} require 1`, [id]));
}

function deleteOne() {
  const { q, id } = chosen;
  return act(`deleted job ${id}`, () => query(`del ${q.name} where id = $1 and ${stateFilter(q, 'dead')} require 1`,
    [id]));
}

function allMatching(verb) {
  const { q, value } = view;
  const [where, params] = valueFilter(q, value);
  const filter = `${stateFilter(q, 'dead')}${where}`;
  if (!confirm(`${verb} every dead letter of ${q.name}${value === undefined ? '' : ` · ${label(value)}`}?`)) {
    return Promise.resolve();
  }
  const text = verb === 'Resend' ? `set ${q.name} ${resendPatch(q)} where ${filter}` : `del ${q.name} where ${filter}`;
  return act(`${verb === 'Resend' ? 'resent' : 'deleted'} all matching`, () => query(text, params));
}

// ------------------------------------------------------------------ throughput

async function loadRates() {
  if (!fullAccess) { $('rates-body').hidden = true; $('rates-off').hidden = false; return; }
  let doc;
  try {
    doc = await call('GET', '/_metrics/recent');
  } catch (e) {
    $('rates-body').hidden = true;
    $('rates-off').hidden = false;
    $('rates-off').textContent = `Throughput: ${e.message}`;
    return;
  }
  $('rates-body').hidden = false;
  $('rates-off').hidden = true;
  const f = doc.fields;
  const at = (name) => f.indexOf(name);
  const s = doc.samples;
  const rate = (name, i) => (s[i][at(name)] - s[i - 1][at(name)]) / Math.max(s[i][0] - s[i - 1][0], 0.001);
  const claims = [];
  const acks = [];
  for (let i = 1; i < s.length; i++) { claims.push(rate('claimed', i)); acks.push(rate('acked', i)); }
  const recent = (xs) => {
    const tail = xs.slice(-10);
    return tail.length ? (tail.reduce((a, b) => a + b, 0) / tail.length).toFixed(1) : '0.0';
  };
  $('claims-rate').textContent = recent(claims);
  $('acks-rate').textContent = recent(acks);
  $('held').textContent = s.length ? String(s[s.length - 1][at('held')]) : '0';
  drawChart(claims, acks);
}

function drawChart(claims, acks) {
  const svg = $('rates-chart');
  svg.replaceChildren();
  const top = Math.max(1, ...claims, ...acks);
  const width = 600;
  const span = Math.max(60, claims.length); // at least a minute wide, at most the ten minutes kept
  for (const [xs, cls] of [[claims, 'claimed'], [acks, 'acked']]) {
    const line = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
    const start = span - xs.length;
    line.setAttribute('points', xs.map((y, i) => `${((start + i) / span) * width},${115 - (y / top) * 105}`).join(' '));
    line.setAttribute('class', cls);
    svg.append(line);
  }
}

// ------------------------------------------------------------------ the page

async function refresh() {
  try {
    const who = await call('GET', '/_whoami');
    fullAccess = Boolean(who.full);
    $('who').textContent = who.full ? 'full access' : `token of ${who.sub || '(no sub)'}: its rules apply`;
    $('who').className = '';
    await loadQueues();
    await loadRates();
    if (view) await showJobs();
    if (chosen) await showJob();
    document.body.dataset.loaded = String(Date.now());
  } catch (e) {
    if (e.status === 401) {
      $('who').textContent = 'a token is needed';
      $('who').className = 'muted';
      notice(`the server answered: ${e.message}. Paste a token above.`, true);
      renderQueues([]);
      $('no-queues').hidden = true;
    } else {
      notice(`${e.message}${e.status ? ` (${e.status})` : ''}`, true);
    }
    document.body.dataset.loaded = String(Date.now());
  }
}

function start() {
  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('token').value.trim();
    if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
    $('token').value = '';
    notice('', false);
    view = null;
    chosen = null;
    $('jobs-panel').hidden = true;
    $('detail-panel').hidden = true;
    refresh();
  });
  $('forget-token').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
  });
  $('refresh').addEventListener('click', refresh);
  $('resend-one').addEventListener('click', resendOne);
  $('delete-one').addEventListener('click', deleteOne);
  $('resend-all').addEventListener('click', () => allMatching('Resend'));
  $('delete-all').addEventListener('click', () => allMatching('Delete'));
  refresh();
  if (EVERY_MS > 0) setInterval(refresh, EVERY_MS);
}

start();
