// The FenecDB dashboard: one page, no framework, no build step. Every number and every action
// goes through the same routes and rules as any client (/query, /batch, /collections, /_whoami,
// /_metrics/recent) with the token pasted above, kept in sessionStorage for this tab only.
// A queue is found by its shape (engine/queues.py holds the same rule; docs/metrics.md states it).
'use strict';

const TOKEN_KEY = 'fenec.token';
const STATES = ['ready', 'leased', 'delayed', 'retrying', 'dead', 'done'];
const PAGE = 50;
const MAX_VALUES = 50; // distinct `queue` values listed per collection
const RATES = ['enqueued', 'claimed', 'acked']; // per queue, from GET /_metrics/recent
// A job's enqueue time, when the collection keeps one (a `timestamp` field of one of these names);
// without it a job's age is counted from its ready time, and the page says which.
const ENQUEUED = ['enqueued_at', 'created_at'];
const OTHER = '(other)'; // the counters' bucket for a collection's values past their first 1 000
const PAYLOAD_CHARS = 60; // a payload's text in the job list; the detail shows it whole
const SVG = 'http://www.w3.org/2000/svg';
const params = new URLSearchParams(location.search);
const EVERY_MS = params.has('every') ? Number(params.get('every')) * 1000 : 5000;

const $ = (id) => document.getElementById(id);
let queues = [];        // [{name, ready, done, error, queue, enqueued, fields}]
let view = null;        // {q, value, state} of the job list
let chosen = null;      // {q, id} of the detail
let fullAccess = false;
let skew = 0;           // the server's clock minus this browser's, in ms (relative times use the server's)
let chart = null;       // the last series drawn, drawn again when the window is resized

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

// ------------------------------------------------------------------ time, as the server tells it

const serverNow = () => Date.now() + skew;

// a duration as an operator reads it: "45 s", "9 min", "2.5 h", "3 d"
function span(ms) {
  const s = Math.abs(ms) / 1000;
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min`;
  if (s < 10 * 3600) return `${(s / 3600).toFixed(1)} h`;
  if (s < 48 * 3600) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

// "in 9 min" or "2 min ago", from an ISO time the server wrote
function relative(iso) {
  const ms = Date.parse(iso) - serverNow();
  return ms > 0 ? `in ${span(ms)}` : `${span(ms)} ago`;
}

// ------------------------------------------------------------------ the counts

function queueOf(c) {
  const q = shapeOf(c);
  if (!q) return null;
  const since = c.fields.find((x) => ENQUEUED.includes(x.name) && x.type === 'timestamp');
  q.enqueued = since ? since.name : null;
  q.fields = c.fields.map((x) => x.name);
  return q;
}

async function countsOf(q, value) {
  const [where, params] = valueFilter(q, value);
  const statements = STATES.map((s) => [`get ${q.name} where ${stateFilter(q, s)}${where} count`, params]);
  statements.push([`get ${q.name} where ${q.ready} <= now()${where} order ${q.ready} limit 1 ` +
    `select now() - ${q.ready} as age`, params]);
  const answers = await batch(statements);
  const counts = Object.fromEntries(STATES.map((s, i) => [s, answers[i][0].count]));
  const oldest = answers[STATES.length].length ? answers[STATES.length][0].age : 0;
  return { counts, oldest };
}

// the rates of one queue value, or of every value of the collection (value undefined on a
// collection with a `queue` field); null when this token may not read the server's counters
function ratesOf(recent, q, value) {
  if (!recent) return null;
  const mine = recent.by.get(q.name) || new Map();
  const sum = Object.fromEntries(RATES.map((k) => [k, 0]));
  for (const [v, r] of mine) {
    // the counters put a job with no `queue` value, and a collection without the field, under ""
    if (value === undefined || v === (value === null ? '' : value)) for (const k of RATES) sum[k] += r[k];
  }
  return sum;
}

// ------------------------------------------------------------------ pausing a queue (docs/queues.md)

const controlKey = (name, target) => `${name}\u0000${target === null ? '' : `"${target}`}`;

// the queue a row's Pause switches: null for the whole collection (its `all` row, or a collection
// with no `queue` field), "" for the jobs with no queue value, else the value
function targetOf(q, value) {
  if (!q.queue || value === undefined) return null;
  return value === null ? '' : value;
}

// `show queues`, by collection and queue: {paused, limits}
async function loadControls() {
  const out = new Map();
  try {
    for (const r of await query('show queues')) out.set(controlKey(r.collection, r.queue), r);
  } catch {
    // an older server, or a refusal: the column stays empty
  }
  return out;
}

function switchQueue(q, target, pause) {
  const named = target === null ? '' : ` ${JSON.stringify(target)}`;
  const verb = pause ? 'pause' : 'resume';
  return act(`${verb}d queue ${q.name}${named}`, () => query(`${verb} queue ${q.name}${named}`));
}

async function loadQueues(recent) {
  const collections = await call('GET', '/collections');
  queues = collections.map(queueOf).filter(Boolean);
  const controls = await loadControls();
  const rows = [];
  for (const q of queues) {
    const values = await queueValues(q);
    if (q.queue && recent) { // a queue value whose jobs are all gone still has its rates
      for (const [v, r] of recent.by.get(q.name) || []) {
        const value = v === '' ? null : v;
        if (v !== OTHER && !values.includes(value) && RATES.some((k) => r[k] > 0)) values.push(value);
      }
    }
    const whole = controls.get(controlKey(q.name, null));
    const control = (value) => {
      const own = controls.get(controlKey(q.name, targetOf(q, value)));
      return { target: targetOf(q, value), own, whole };
    };
    if (q.queue && values.length > 1) {
      rows.push({ q, value: undefined, total: true, ...(await countsOf(q, undefined)), rate: ratesOf(recent, q),
        control: control(undefined) });
    }
    for (const value of values) {
      rows.push({ q, value, total: false, ...(await countsOf(q, value)), rate: ratesOf(recent, q, value),
        control: control(value) });
    }
  }
  renderQueues(rows, recent);
}

function age(ms) {
  if (!ms) return '–';
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  if (s < 3600) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function perSecond(x) {
  if (!x) return '0';
  if (x < 1) return x.toFixed(2);
  if (x < 100) return x.toFixed(1);
  return String(Math.round(x));
}

function label(value) {
  if (value === undefined) return '';
  return value === null ? '(none)' : value;
}

function renderQueues(rows, recent) {
  const body = $('queues').tBodies[0];
  body.replaceChildren();
  $('no-queues').hidden = rows.length > 0;
  $('queues-note').hidden = rows.length === 0;
  $('rates-group').textContent = recent ? 'per second, last minute' : 'per second: the server token only';
  for (const { q, value, total, counts, oldest, rate, control } of rows) {
    const tr = body.insertRow();
    tr.dataset.collection = q.name;
    if (total) {
      tr.dataset.total = 'true';
      tr.className = 'total';
    } else {
      tr.dataset.queue = label(value);
    }
    tr.insertCell().textContent = q.name;
    const name = tr.insertCell();
    name.textContent = total ? 'all' : label(value);
    if (total) name.title = `every queue of ${q.name}, added up`;
    renderControl(tr.insertCell(), q, control);
    for (const s of STATES) {
      const td = tr.insertCell();
      td.className = s === 'retrying' ? 'n part' : 'n';
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = String(counts[s]);
      b.dataset.state = s;
      b.className = `${s}${counts[s] ? '' : ' zero'}`;
      b.title = s === 'retrying' ? 'list the jobs that failed before and wait for another try (in ready or delayed)'
        : `list the ${s} jobs`;
      b.addEventListener('click', () => { view = { q, value, state: s }; chosen = null; showJobs(true); });
      td.append(b);
    }
    const td = tr.insertCell();
    td.className = 'n oldest';
    td.textContent = age(oldest);
    for (const k of RATES) {
      const cell = tr.insertCell();
      cell.className = 'n rate';
      cell.dataset.rate = k;
      cell.textContent = rate ? perSecond(rate[k]) : '–';
      cell.title = rate ? `jobs ${k} per second, over the last ${Math.round(recent.span)} s`
        : 'the rates need the server token';
    }
  }
}

// a row's controls: paused or running (paused with its whole collection), its limits, and the switch
function renderControl(td, q, control) {
  td.className = 'control';
  if (!control) return;
  const { target, own, whole } = control;
  const paused = Boolean(own && own.paused);
  const byCollection = target !== null && Boolean(whole && whole.paused);
  td.dataset.paused = String(paused || byCollection);
  const state = document.createElement('span');
  state.className = paused || byCollection ? 'paused' : 'running';
  state.textContent = paused ? 'paused' : byCollection ? 'paused (collection)' : 'running';
  td.append(state);
  const limits = own ? own.limits : [];
  if (limits.length) {
    const l = document.createElement('small');
    l.className = 'limits';
    l.textContent = ` · ${limits.join(' · ')}`;
    td.append(l);
  }
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'switch';
  b.dataset.action = paused ? 'resume' : 'pause';
  b.textContent = paused ? 'Resume' : 'Pause';
  b.title = paused ? 'let claims take its jobs again' : 'claims take none of its jobs until resumed; puts still land';
  b.addEventListener('click', () => switchQueue(q, target, !paused));
  td.append(' ', b);
}

// ------------------------------------------------------------------ the job list and a job

const WHEN = { ready: 'ready since', leased: 'lease ends', delayed: 'due', retrying: 'next try', dead: null,
  done: 'done' };

const text = (v) => (v === null || v === undefined ? '' : String(v));

// [text, the ISO time it was worked out from] of a job's time in a list of `state` jobs
function whenOf(q, state, job) {
  const iso = state === 'done' ? (q.done ? job[q.done] : null) : job[q.ready];
  if (!iso) return ['–', ''];
  const ms = Date.parse(iso) - serverNow();
  if (Math.abs(ms) < 1000 && state !== 'done') return ['now', iso];
  if (ms > 0) return [`in ${span(ms)}`, iso];
  // the ready time has passed: a job still owned is a lease that ran out and may be claimed again
  if (job.owner != null && state !== 'done') return [`lease lapsed ${span(ms)} ago`, iso];
  return [state === 'retrying' ? `due ${span(ms)} ago` : `${span(ms)} ago`, iso];
}

// [text, ISO] of a job's age: since it was enqueued where the collection keeps that time, else
// since its ready time (nothing before it is due)
function ageOf(q, job) {
  const iso = job[q.enqueued || q.ready];
  if (!iso) return ['–', ''];
  const ms = serverNow() - Date.parse(iso);
  return ms < 0 ? ['–', ''] : [span(ms), iso];
}

function payloadOf(q, job) {
  if (q.fields.includes('payload')) return job.payload;
  const known = new Set(['id', 'owner', 'attempts', q.ready, q.queue, q.error, q.done, q.enqueued]);
  return Object.fromEntries(Object.entries(job).filter(([k]) => !known.has(k)));
}

function shortened(v) {
  const t = v === undefined ? '' : JSON.stringify(v);
  return t.length > PAYLOAD_CHARS ? `${t.slice(0, PAYLOAD_CHARS - 1)}…` : t;
}

// the job list's columns for jobs of `state`: [heading, class, job => [text, title]]
function columns(q, state) {
  const cols = [['id', 'id', (j) => [String(j.id), '']]];
  if (q.queue) cols.push(['queue', 'queue', (j) => [text(j[q.queue]), '']]);
  cols.push(['attempts', 'n', (j) => [text(j.attempts), '']]);
  if (state === 'ready' || state === 'leased' || state === 'retrying') cols.push(['owner', 'owner', (j) => [text(j.owner), '']]);
  if (WHEN[state]) cols.push([WHEN[state], 'when', (j) => whenOf(q, state, j)]);
  cols.push([`age (since ${q.enqueued || q.ready})`, 'age', (j) => ageOf(q, j)]);
  cols.push(['payload', 'payload', (j) => [shortened(payloadOf(q, j)), 'the whole payload is in the job\'s detail']]);
  if (q.error) cols.push(['error', 'err', (j) => [text(j[q.error]), text(j[q.error])]]);
  return cols;
}

async function showJobs(scroll) {
  if (!view) return;
  const { q, value, state } = view;
  const [where, params] = valueFilter(q, value);
  const order = state === 'ready' || state === 'delayed' || state === 'leased' ? q.ready : 'id';
  const [rows, clock] = await batch([
    [`get ${q.name} where ${stateFilter(q, state)}${where} order ${order} limit ${PAGE + 1}`, params],
    [`get ${q.name} limit 1 select now() as now`, []],
  ]);
  if (clock.length) skew = Date.parse(clock[0].now) - Date.now();
  $('jobs-panel').hidden = false;
  $('jobs-title').textContent = `${state} jobs in ${q.name}${value === undefined ? '' : ` · ${label(value)}`}`;
  $('bulk').hidden = state !== 'dead' || !rows.length;
  $('jobs-more').hidden = rows.length <= PAGE;
  const cols = columns(q, state);
  const head = $('jobs').tHead.rows[0];
  head.replaceChildren(...cols.map(([heading, cls]) => {
    const th = document.createElement('th');
    th.textContent = heading;
    th.className = cls;
    return th;
  }));
  const body = $('jobs').tBodies[0];
  body.replaceChildren();
  if (!rows.length) {
    const td = body.insertRow().insertCell();
    td.colSpan = cols.length;
    td.className = 'muted none';
    td.textContent = `no ${state} job`;
  }
  for (const job of rows.slice(0, PAGE)) {
    const tr = body.insertRow();
    tr.dataset.id = String(job.id);
    if (chosen && chosen.id === job.id) tr.className = 'chosen';
    for (const [, cls, cell] of cols) {
      const [t, title] = cell(job);
      const td = tr.insertCell();
      td.className = cls;
      td.textContent = t;
      if (title) td.title = title;
    }
    tr.addEventListener('click', () => { chosen = { q, id: job.id }; showJob(); showJobs(); });
  }
  if (scroll) $('jobs-panel').scrollIntoView({ block: 'nearest' });
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
  const readyAt = job[q.ready] ? Date.parse(job[q.ready]) : null;
  let state = 'dead';
  if (readyAt === null) state = q.done && job[q.done] ? 'done' : 'dead';
  else if (readyAt <= serverNow()) state = 'ready';
  else state = job.owner != null ? 'leased' : 'delayed';
  const retrying = (state === 'ready' || state === 'delayed') && job.attempts > 0 && q.error && job[q.error] != null;
  // [name, text, ISO time it stands for]
  const facts = [
    ['state', retrying ? `${state} · retrying (failed before, waits for another try)` : state],
    ['attempts', text(job.attempts)], ['error', q.error ? text(job[q.error]) : ''], ['owner', text(job.owner)],
  ];
  if (q.queue) facts.splice(1, 0, ['queue', text(job[q.queue])]);
  if (WHEN[state] && state !== 'done') facts.push([WHEN[state], ...whenOf(q, state, job)]);
  facts.push([`age (since ${q.enqueued || q.ready})`, ...ageOf(q, job)]);
  if (q.done) facts.push(['done', ...(job[q.done] ? [relative(job[q.done]), job[q.done]] : ['', ''])]);
  for (const [k, v, iso] of facts) {
    const dt = document.createElement('dt');
    dt.textContent = k;
    const dd = document.createElement('dd');
    dd.dataset.fact = k;
    const main = document.createElement('span');
    main.className = 'value';
    main.textContent = v === '' ? '–' : v;
    dd.append(main);
    if (iso) {
      dd.title = iso;
      const raw = document.createElement('span');
      raw.className = 'iso';
      raw.textContent = iso;
      dd.append(raw);
    }
    dl.append(dt, dd);
  }
  const payload = payloadOf(q, job);
  $('detail-payload').textContent = JSON.stringify(payload === undefined ? null : payload, null, 2);
  $('detail-actions').hidden = state !== 'dead';
}

// ------------------------------------------------------------------ dead letters

function resendPatch(q) {
  return `{${q.ready}: now(), attempts: 0${q.error ? `, ${q.error}: null` : ''}}`;
}

async function act(what, run) {
  try {
    const answer = await run();
    notice(answer && answer.message !== undefined ? answer.message
      : `${what}: ${answer && answer.affected !== undefined ? answer.affected : 0} job(s)`, false);
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

// ------------------------------------------------------------------ schedules

const SCHEDULE_NAME = /^[\p{L}_][\p{L}\p{N}_]*$/u; // a FenecQL name: nothing else is put in a statement

// `show schedules`: a row per schedule this token may see; the panel stays hidden when there are none
async function loadSchedules() {
  let rows = [];
  try {
    rows = await query('show schedules');
  } catch (e) {
    rows = [];
  }
  const body = $('schedules').querySelector('tbody');
  body.replaceChildren();
  $('schedules-panel').hidden = !rows.length;
  for (const s of rows) {
    const tr = document.createElement('tr');
    tr.dataset.schedule = s.name;
    const cell = (text, title) => {
      const td = document.createElement('td');
      td.textContent = text;
      if (title) td.title = title;
      tr.append(td);
      return td;
    };
    cell(s.name);
    cell(s.spec);
    cell(s.zone || '');
    cell(s.collection);
    cell(s.paused ? '–' : relative(s.next_due), s.next_due);
    cell(s.last_fired ? relative(s.last_fired) : 'never', s.last_fired || '');
    cell(String(s.fires)).className = 'n';
    const state = cell(s.paused ? 'paused' : (s.error ? 'failing' : 'running'), s.error || '');
    state.className = s.paused ? 'muted' : (s.error ? 'error' : '');
    const actions = document.createElement('td');
    const button = (label, verb) => {
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = label;
      b.dataset.verb = verb;
      b.addEventListener('click', () => controlSchedule(verb, s.name));
      actions.append(b);
    };
    button(s.paused ? 'Resume' : 'Pause', s.paused ? 'resume' : 'pause');
    button('Fire now', 'fire');
    tr.append(actions);
    body.append(tr);
  }
}

async function controlSchedule(verb, name) {
  if (!SCHEDULE_NAME.test(name)) return;
  try {
    const answer = await query(`${verb} schedule ${name}`);
    notice(answer && answer.message ? answer.message : `${verb} schedule ${name}`, false);
  } catch (e) {
    notice(`${verb} schedule ${name} refused: ${e.message} (${e.status || 'network'})`, true);
  }
  await refresh();
}

// ------------------------------------------------------------------ throughput

// GET /_metrics/recent, read like /_metrics: the whole server's per-second samples (drawn here)
// and per queue its rates over about the last minute ({span, by: collection -> value -> rates});
// null when this token may not read the server's counters
async function loadRecent() {
  const off = (message) => {
    $('rates-body').hidden = true;
    $('rates-off').hidden = false;
    if (message) $('rates-off').textContent = message;
    chart = null;
    return null;
  };
  if (!fullAccess) {
    renderReplication(null);
    return off('');
  }
  let doc;
  try {
    doc = await call('GET', '/_metrics/recent');
  } catch (e) {
    renderReplication(null);
    return off(`Throughput: ${e.message}`);
  }
  renderReplication(doc.replication || null);
  $('rates-body').hidden = false;
  $('rates-off').hidden = true;
  const f = doc.fields;
  const at = (name) => f.indexOf(name);
  const s = doc.samples;
  const rate = (name, i) => (s[i][at(name)] - s[i - 1][at(name)]) / Math.max(s[i][0] - s[i - 1][0], 0.001);
  const series = Object.fromEntries(RATES.map((k) => [k, []]));
  const times = [];
  for (let i = 1; i < s.length; i++) {
    times.push(s[i][0]);
    for (const k of RATES) series[k].push(rate(k, i));
  }
  const recent = (xs) => {
    const tail = xs.slice(-10);
    return tail.length ? (tail.reduce((a, b) => a + b, 0) / tail.length).toFixed(1) : '0.0';
  };
  $('enqueued-rate').textContent = recent(series.enqueued);
  $('claims-rate').textContent = recent(series.claimed);
  $('acks-rate').textContent = recent(series.acked);
  $('held').textContent = s.length ? String(s[s.length - 1][at('held')]) : '0';
  chart = { times, series, end: s.length ? s[s.length - 1][0] : Date.now() / 1000 };
  drawChart();
  const by = new Map();
  const fields = doc.queue_fields || [];
  for (const row of doc.queues || []) {
    const r = Object.fromEntries(fields.map((name, i) => [name, row[i]]));
    if (!by.has(r.collection)) by.set(r.collection, new Map());
    by.get(r.collection).set(r.queue, r);
  }
  return { span: doc.queues_span_s || 0, by };
}

// ------------------------------------------------------------------ replication

const seconds = (s) => (s === null || s === undefined ? '–' : s < 60 ? `${s.toFixed(1)} s` : span(s * 1000));

// the `replication` of /_metrics/recent (GET /_replication/status): the role; on a replica its
// primary, whether it is connected and its lag; on a primary each replica's sent, acked and lag
function renderReplication(r) {
  $('replication-panel').hidden = !r;
  if (!r) return;
  $('replication-role').textContent = r.role;
  const replica = r.role === 'replica';
  $('replication-of').textContent = replica ? ` of ${r.primary}` : r.sync_replicas
    ? `: a write is answered once ${r.sync_replicas} replica(s) hold it (held by them: change ${r.synced})` : '';
  $('replica-state').hidden = !replica;
  $('replicas').hidden = replica || !(r.replicas || []).length;
  $('no-replicas').hidden = replica || (r.replicas || []).length > 0;
  if (replica) {
    $('replica-connected').textContent = r.connected ? 'yes' : 'no';
    $('replica-behind').textContent = `${r.behind} change${r.behind === 1 ? '' : 's'}, ${seconds(r.behind_s)}`;
    $('replica-contact').textContent = r.last_contact_s === null ? 'never' : `${seconds(r.last_contact_s)} ago`;
    return;
  }
  const body = $('replicas').tBodies[0];
  body.replaceChildren();
  for (const x of r.replicas || []) {
    const tr = document.createElement('tr');
    tr.dataset.peer = x.peer;
    const cells = [x.peer, String(x.sent), x.acked ? String(x.acked) : '–', String(x.behind), seconds(x.connected_s)];
    cells.forEach((text, i) => {
      const td = document.createElement('td');
      td.textContent = text;
      if (i) td.className = 'n';
      td.dataset.field = ['peer', 'sent', 'acked', 'behind', 'connected'][i];
      tr.append(td);
    });
    body.append(tr);
  }
}

function svg(name, attrs, content) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (content !== undefined) el.textContent = content;
  return el;
}

// the top of the value axis: 4 steps of 1, 2, 2.5 or 5 times a power of ten
function niceTop(max) {
  if (!(max > 0)) return 1;
  const raw = max / 4;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const n = raw / mag;
  const step = (n <= 1 ? 1 : n <= 2 ? 2 : n <= 2.5 ? 2.5 : n <= 5 ? 5 : 10) * mag;
  return step * 4;
}

const clockTime = (seconds) => new Date(seconds * 1000).toLocaleTimeString([], { hour12: false });

// the rates over time: a time axis (the last minutes, to the newest sample), a value axis in
// jobs/s, one line per series (the legend above names them), drawn at the element's own size so
// the labels keep their size
function drawChart() {
  const el = $('rates-chart');
  el.replaceChildren();
  if (!chart) return;
  const W = Math.max(320, Math.round(el.clientWidth || 600));
  const H = 210;
  const m = { l: 52, r: 16, t: 14, b: 40 };
  const pw = W - m.l - m.r;
  const ph = H - m.t - m.b;
  el.setAttribute('viewBox', `0 0 ${W} ${H}`);
  const { times, series, end } = chart;
  const first = times.length ? times[0] : end;
  const minutes = Math.min(10, Math.max(1, Math.ceil((end - first) / 60)));
  const from = end - minutes * 60;
  const x = (t) => m.l + ((t - from) / (minutes * 60)) * pw;
  const top = niceTop(Math.max(0, ...RATES.flatMap((k) => series[k])));
  const y = (v) => m.t + ph - (v / top) * ph;

  for (let i = 0; i <= 4; i++) {
    const v = (top / 4) * i;
    el.append(svg('line', { x1: m.l, x2: W - m.r, y1: y(v), y2: y(v), class: i ? 'grid' : 'axis' }));
    el.append(svg('text', { x: m.l - 6, y: y(v) + 4, class: 'tick y' }, String(Number(v.toPrecision(3)))));
  }
  el.append(svg('text', { x: 12, y: m.t + ph / 2, class: 'unit', transform: `rotate(-90 12 ${m.t + ph / 2})` },
    'jobs/s'));
  el.append(svg('line', { x1: m.l, x2: m.l, y1: m.t, y2: m.t + ph, class: 'axis' }));

  const every = minutes <= 1 ? 15 : minutes <= 2 ? 30 : minutes <= 5 ? 60 : 120;
  for (let ago = 0; ago <= minutes * 60; ago += every) {
    const at = x(end - ago);
    el.append(svg('line', { x1: at, x2: at, y1: m.t + ph, y2: m.t + ph + 5, class: 'axis' }));
    const name = ago === 0 ? 'now' : ago < 60 ? `−${ago} s` : `−${ago / 60} min`;
    el.append(svg('text', { x: at, y: m.t + ph + 17, class: `tick x${ago === 0 ? ' end' : ''}` }, name));
  }
  el.append(svg('text', { x: m.l + pw / 2, y: H - 4, class: 'title' },
    `time: the last ${minutes} min, up to ${clockTime(end)} (server samples, one a second)`));

  for (const k of RATES) {
    const points = times.map((t, i) => [t, series[k][i]]).filter(([t]) => t >= from)
      .map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`);
    el.append(svg('polyline', { points: points.join(' '), class: `series ${k}` }));
  }
}

// ------------------------------------------------------------------ the page

async function refresh() {
  try {
    const who = await call('GET', '/_whoami');
    fullAccess = Boolean(who.full);
    $('who').textContent = who.full ? 'full access' : `token of ${who.sub || '(no sub)'}: its rules apply`;
    $('who').className = '';
    await loadQueues(await loadRecent());
    await loadSchedules();
    if (view) await showJobs();
    if (chosen) await showJob();
    $('updated').textContent = `updated ${new Date().toLocaleTimeString([], { hour12: false })}`;
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
  window.addEventListener('resize', drawChart);
  refresh();
  if (EVERY_MS > 0) setInterval(refresh, EVERY_MS);
}

start();
