// The murmur registry dashboard: the live table of capsule sessions, from GET /events.
//
// Rules this file keeps:
// - The token lives in sessionStorage (this tab only) and travels only in an Authorization
//   header to this page's own origin: never in a URL, a cookie or persistent local storage.
// - Data from the registry (capsule names, reasons, paths) reaches the page through
//   textContent and attributes only, never through an HTML-parsing sink, so it cannot become
//   markup.
// - EventSource cannot send an Authorization header, so the stream is read with fetch and
//   parsed here. Every connection starts with a `snapshot` that replaces the whole table, so a
//   reconnect (after the server dropped us, or went away) needs no bookkeeping of missed events.
//   A `snapshot` may also arrive mid-stream (in place of many changes at once): it replaces
//   the whole table the same way.
// - When the registry cannot serve the stream (a 503 problem, e.g. its running directory is
//   missing) or ends it (saying why in a last comment line), the page says so in the
//   registry's own words, keeps the last table greyed out, and retries with its backoff.
'use strict';

const TOKEN_KEY = 'murmur-registry.token';
// The server sends a keep-alive comment every 15 s: three missed ones mean a dead stream.
const STALL_MS = 45000;
const BACKOFF_FIRST_MS = 1000;
const BACKOFF_MAX_MS = 30000;
const STATES = ['live', 'unreachable', 'gone'];

const $ = (id) => document.getElementById(id);
const ui = {
  connection: $('connection'),
  connectionText: $('connection-text'),
  forget: $('forget'),
  banner: $('banner'),
  bannerText: $('banner-text'),
  retry: $('retry'),
  login: $('login'),
  loginForm: $('login-form'),
  loginError: $('login-error'),
  token: $('token'),
  sessions: $('sessions'),
  summary: $('summary'),
  filter: $('filter'),
  outcome: $('outcome'),
  rows: $('rows'),
  empty: $('empty'),
  dialog: $('confirm'),
  dialogTitle: $('confirm-title'),
  dialogText: $('confirm-text'),
  dialogOk: $('confirm-ok'),
  dialogCancel: $('confirm-cancel'),
};

// What the registry last told us, and what this page is doing about it.
const model = {
  sessions: new Map(), // session_id -> Session, as the registry sent it
  unreadable: 0,
  busy: new Map(), // session_id -> 'stop' | 'kill' while a request is in flight
  live: false, // whether the table reflects a stream that is open right now
};
const rows = new Map(); // session_id -> { tr, cells }

// ---------------------------------------------------------------------------------------------
// The token
// ---------------------------------------------------------------------------------------------

// sessionStorage can throw (storage disabled); the token then lives in memory only.
let memoryToken = null;

function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) ?? memoryToken;
  } catch {
    return memoryToken;
  }
}

function setToken(token) {
  memoryToken = token;
  try {
    if (token === null) sessionStorage.removeItem(TOKEN_KEY);
    else sessionStorage.setItem(TOKEN_KEY, token);
  } catch {
    // Memory only: see above.
  }
}

function authHeaders(extra) {
  return Object.assign({ Authorization: 'Bearer ' + getToken() }, extra);
}

// ---------------------------------------------------------------------------------------------
// Screens and messages
// ---------------------------------------------------------------------------------------------

function setConnection(state, text) {
  ui.connection.dataset.state = state;
  ui.connectionText.textContent = text;
}

function showBanner(text) {
  ui.bannerText.textContent = text;
  ui.banner.hidden = false;
}

function hideBanner() {
  ui.banner.hidden = true;
}

function showLogin(error) {
  ui.sessions.hidden = true;
  ui.forget.hidden = true;
  hideBanner();
  ui.login.hidden = false;
  ui.loginError.textContent = error || '';
  ui.loginError.hidden = !error;
  ui.token.setAttribute('aria-invalid', error ? 'true' : 'false');
  ui.token.value = '';
  ui.token.focus();
}

function showSessions() {
  ui.login.hidden = true;
  ui.sessions.hidden = false;
  ui.forget.hidden = false;
}

// An action's outcome, in the live region above the table. `tone` is ok | info | error.
function announce(text, tone) {
  ui.outcome.textContent = text;
  ui.outcome.dataset.tone = tone;
}

// ---------------------------------------------------------------------------------------------
// The stream: GET /events read with fetch, parsed as server-sent events
// ---------------------------------------------------------------------------------------------

const stream = {
  controller: null, // AbortController of the current connection
  retryTimer: null,
  backoff: BACKOFF_FIRST_MS,
};

function disconnect() {
  clearTimeout(stream.retryTimer);
  stream.retryTimer = null;
  if (stream.controller) stream.controller.abort();
  stream.controller = null;
}

async function connect() {
  disconnect();
  if (!getToken()) {
    showLogin();
    return;
  }
  const controller = new AbortController();
  stream.controller = controller;
  setConnection('connecting', 'Connecting…');
  let response;
  try {
    response = await fetch('/events', {
      headers: authHeaders({ Accept: 'text/event-stream' }),
      cache: 'no-store',
      credentials: 'omit',
      signal: controller.signal,
    });
  } catch {
    if (!controller.signal.aborted) lost('The registry is unreachable.');
    return;
  }
  if (controller.signal.aborted) return;
  if (response.status === 401) {
    tokenRefused();
    return;
  }
  if (!response.ok || !response.body) {
    const detail = await problemDetail(response);
    if (response.status === 503 && detail) {
      // Temporary by definition (its running directory is gone, it is overloaded or shutting
      // down): say what the registry says, and keep trying, no sooner than it asks.
      lost(`The registry cannot serve the live view: ${detail}.`, 'Registry unavailable, retrying…',
        retryAfterMs(response));
    } else {
      lost(`The registry answered ${response.status}${detail ? ': ' + detail : '.'}`,
        'Registry error, retrying…');
    }
    return;
  }
  let lastWords = null;
  try {
    lastWords = await readEvents(response.body, controller, dispatch);
  } catch {
    // A reset connection, an aborted read or the stall watchdog: handled below.
  }
  if (controller.signal.aborted && stream.controller !== controller) return;
  lost(lastWords ? `The registry ended the stream: ${lastWords.replace(/^stream ended:\s*/, '')}.`
    : 'The connection to the registry closed.');
}

// The stream ended or never started: keep the table (marked stale) and try again later, each
// failure waiting longer (with some jitter, so many tabs do not retry in step).
function lost(why, status = 'Registry unreachable, reconnecting…', notBeforeMs = 0) {
  if (stream.controller) stream.controller.abort();
  stream.controller = null;
  model.live = false;
  document.body.classList.add('stale');
  // Jitter on whichever wait wins, so tabs told the same Retry-After do not retry in step.
  const delay = Math.round(Math.max(notBeforeMs, stream.backoff) * (1 + Math.random() * 0.3));
  stream.backoff = Math.min(stream.backoff * 2, BACKOFF_MAX_MS);
  setConnection('down', status);
  showBanner(`${why} Reconnecting automatically (next try in ${Math.ceil(delay / 1000)} s); ` +
    'the table shows the last state seen.');
  applyFilter();
  clearTimeout(stream.retryTimer);
  stream.retryTimer = setTimeout(connect, delay);
}

// The wait a refusal asks for (`Retry-After` in seconds; an HTTP date is not sent by the
// registry and counts as none), capped like the backoff.
function retryAfterMs(response) {
  const seconds = Number(response.headers.get('Retry-After'));
  return Number.isFinite(seconds) && seconds > 0
    ? Math.min(seconds * 1000, BACKOFF_MAX_MS) : 0;
}

function tokenRefused() {
  disconnect();
  setToken(null);
  clearTable();
  setConnection('refused', 'Token refused');
  showLogin('The registry refused that token. Paste the current one: it may have been ' +
    'mistyped, or rotated with "murmur-registry token --rotate".');
}

// Read server-sent events from `body` until it ends, calling `onEvent(name, data, id)` for each.
// Lines end in LF, CRLF or CR; `:` lines are comments (keep-alives); an empty line ends an event.
// Answers the last comment with text, if the stream ended cleanly: the registry's reason for
// ending it (keep-alives are empty comments).
async function readEvents(body, controller, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let name = '';
  let data = [];
  let id = null;
  let skipLF = false;
  let comment = null;
  let watchdog = null;
  const feedWatchdog = () => {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => controller.abort(), STALL_MS);
  };
  controller.signal.addEventListener('abort', () => reader.cancel().catch(() => {}));
  feedWatchdog();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return comment;
      feedWatchdog();
      let text = decoder.decode(value, { stream: true });
      // A chunk that ended in CR has ended its line already; if this one starts with the LF
      // of that CRLF, it is not another (empty) line.
      // Once that LF is dropped the CRLF is over, even if nothing else came in this chunk; a
      // chunk that decodes to nothing yet (half a UTF-8 character) leaves the CR pending.
      if (skipLF && text.startsWith('\n')) {
        text = text.slice(1);
        skipLF = false;
      }
      if (text === '') continue;
      skipLF = text.endsWith('\r');
      buffer += text;
      const lines = buffer.split(/\r\n|\r|\n/);
      buffer = lines.pop();
      for (const line of lines) {
        if (line === '') {
          if (data.length > 0) onEvent(name || 'message', data.join('\n'), id);
          name = '';
          data = [];
          continue;
        }
        if (line.startsWith(':')) {
          const text = line.slice(1).trim();
          if (text) comment = text;
          continue;
        }
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'event') name = value;
        else if (field === 'data') data.push(value);
        else if (field === 'id') id = value;
      }
    }
  } finally {
    clearTimeout(watchdog);
  }
}

function dispatch(name, text) {
  let payload;
  try {
    payload = JSON.parse(text);
  } catch {
    console.warn('murmur registry: an event whose data is not JSON', name);
    return;
  }
  switch (name) {
    case 'snapshot':
      onSnapshot(payload);
      break;
    case 'session.added':
    case 'session.changed':
      if (payload.session && payload.session.session_id) {
        const changed = model.sessions.has(payload.session.session_id);
        model.sessions.set(payload.session.session_id, payload.session);
        render();
        if (changed) flash(payload.session.session_id);
      }
      break;
    case 'session.removed':
      model.sessions.delete(payload.session_id);
      model.busy.delete(payload.session_id);
      render();
      break;
    default:
      // An event this page does not know yet: newer registries may add some.
      break;
  }
}

function onSnapshot(payload) {
  model.sessions = new Map();
  for (const session of payload.sessions || []) {
    if (session && session.session_id) model.sessions.set(session.session_id, session);
  }
  model.unreadable = Number(payload.unreadable) || 0;
  model.live = true;
  stream.backoff = BACKOFF_FIRST_MS;
  document.body.classList.remove('stale');
  hideBanner();
  showSessions();
  setConnection('live', 'Connected, live');
  render();
}

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

function clearTable() {
  model.sessions = new Map();
  model.unreadable = 0;
  model.busy.clear();
  model.live = false;
  for (const { tr } of rows.values()) tr.remove();
  rows.clear();
  announce('', 'info');
  applyFilter();
}

function stateOf(session) {
  const state = session.liveness && session.liveness.state;
  return STATES.includes(state) ? state : 'unknown';
}

// Newest first: by start time, then by session id (murmur's ids sort by creation time).
function newestFirst(a, b) {
  const ta = Date.parse(a.started_at) || 0;
  const tb = Date.parse(b.started_at) || 0;
  if (ta !== tb) return tb - ta;
  return a.session_id < b.session_id ? 1 : a.session_id > b.session_id ? -1 : 0;
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function wrap(...children) {
  const div = el('div');
  div.append(...children);
  return div;
}

// One row's elements, built once per session and updated in place afterwards, so a button
// keeps the keyboard focus while events arrive.
function buildRow(id) {
  const tr = el('tr');
  tr.dataset.sessionId = id;
  const cell = (label, className) => {
    const td = el('td', className);
    td.dataset.label = label; // shown as a heading in the narrow, stacked layout
    tr.append(td);
    return td;
  };
  const cells = {};
  const state = cell('State', 'col-state');
  cells.badge = el('span', 'badge');
  cells.badgeIcon = el('span', 'badge-icon');
  cells.badgeIcon.setAttribute('aria-hidden', 'true');
  cells.badgeText = el('span', 'badge-text');
  cells.badge.append(cells.badgeIcon, cells.badgeText);
  cells.reason = el('span', 'reason');
  // One wrapper per cell, so the narrow layout's grid sees a label and one block beside it.
  state.append(wrap(cells.badge, cells.reason));

  const capsule = cell('Capsule', 'col-capsule');
  cells.name = el('span', 'capsule-name');
  cells.version = el('span', 'capsule-version');
  cells.workdir = el('span', 'workdir mono');
  capsule.append(wrap(cells.name, cells.version, cells.workdir));

  cells.id = el('code', 'session-id');
  cell('Session', 'col-session').append(cells.id);
  cells.door = el('code', 'door');
  cell('Door', 'col-door').append(cells.door);
  cells.pid = el('span', 'mono');
  cell('PID', 'col-pid num').append(cells.pid);
  cells.uptime = el('time', 'uptime');
  cell('Uptime', 'col-uptime').append(cells.uptime);

  const actions = cell('Actions', 'col-actions');
  cells.stop = el('button', 'stop', 'Stop');
  cells.stop.type = 'button';
  cells.stop.addEventListener('click', () => requestAction('stop', id, cells.stop));
  cells.kill = el('button', 'kill danger-outline', 'Kill');
  cells.kill.type = 'button';
  cells.kill.addEventListener('click', () => requestAction('kill', id, cells.kill));
  actions.append(cells.stop, cells.kill);
  return { tr, cells };
}

const STATE_ICONS = { live: '●', unreachable: '◐', gone: '○', unknown: '?' };

function fillRow(row, session) {
  const { tr, cells } = row;
  const state = stateOf(session);
  tr.dataset.state = state;
  cells.badge.className = `badge badge-${state}`;
  cells.badgeIcon.textContent = STATE_ICONS[state];
  cells.badgeText.textContent = state;
  const liveness = session.liveness || {};
  const reason = liveness.reason || (liveness.process && liveness.process !== 'alive'
    ? `process ${liveness.process}` : '');
  cells.reason.textContent = reason;
  cells.reason.hidden = !reason;

  const name = String(session.capsule_name ?? '');
  cells.name.textContent = name || '(unnamed)';
  cells.version.textContent = session.capsule_version ? String(session.capsule_version) : '';
  cells.workdir.textContent = String(session.workdir ?? '');
  cells.workdir.title = String(session.workdir ?? '');
  cells.id.textContent = session.session_id;
  cells.door.textContent = session.url == null ? 'no door' : String(session.url);
  cells.door.classList.toggle('none', session.url == null);
  cells.pid.textContent = String(session.pid ?? '');
  cells.uptime.dateTime = String(session.started_at ?? '');
  cells.uptime.title = session.started_at ? `started ${session.started_at}` : '';
  tickRow(row, session, Date.now());

  const busy = model.busy.get(session.session_id);
  cells.stop.disabled = Boolean(busy);
  cells.kill.disabled = Boolean(busy);
  cells.stop.textContent = busy === 'stop' ? 'Stopping…' : 'Stop';
  cells.kill.textContent = busy === 'kill' ? 'Killing…' : 'Kill';
  const who = `${name || 'session'} ${session.session_id}`;
  cells.stop.setAttribute('aria-label', `Stop ${who}`);
  cells.kill.setAttribute('aria-label', `Kill ${who}`);
}

function render() {
  const sessions = [...model.sessions.values()].sort(newestFirst);
  for (const [id, row] of rows) {
    if (!model.sessions.has(id)) removeRow(id, row);
  }
  sessions.forEach((session, index) => {
    let row = rows.get(session.session_id);
    if (!row) {
      row = buildRow(session.session_id);
      rows.set(session.session_id, row);
    }
    fillRow(row, session);
    // Move a row only when it is out of place: moving a node takes the focus from it.
    const here = ui.rows.children[index];
    if (here !== row.tr) ui.rows.insertBefore(row.tr, here || null);
  });
  applyFilter();
}

// Take a row out; if the keyboard focus was in it, hand the focus to a neighbour's button
// (or the filter), not to the page itself.
function removeRow(id, row) {
  const hadFocus = row.tr.contains(document.activeElement);
  const next = row.tr.nextElementSibling || row.tr.previousElementSibling;
  row.tr.remove();
  rows.delete(id);
  if (hadFocus) {
    const target = next && next.querySelector('button:not([disabled])');
    (target || ui.filter).focus();
  }
}

function flash(id) {
  const row = rows.get(id);
  if (!row) return;
  row.tr.classList.remove('flash');
  void row.tr.offsetWidth; // restart the animation
  row.tr.classList.add('flash');
}

function applyFilter() {
  const wanted = ui.filter.value;
  let shown = 0;
  for (const { tr } of rows.values()) {
    const visible = wanted === 'all' || tr.dataset.state === wanted;
    tr.hidden = !visible;
    if (visible) shown += 1;
  }
  const total = model.sessions.size;
  if (shown > 0) {
    ui.empty.hidden = true;
  } else {
    ui.empty.hidden = false;
    ui.empty.textContent = total === 0
      ? 'No capsule sessions are running on this machine.'
      : `No ${wanted} sessions; ${total} hidden by the filter.`;
  }
  renderSummary(shown);
}

function renderSummary(shown) {
  const counts = { live: 0, unreachable: 0, gone: 0, unknown: 0 };
  for (const session of model.sessions.values()) counts[stateOf(session)] += 1;
  const total = model.sessions.size;
  const parts = [`${total} ${total === 1 ? 'session' : 'sessions'}`];
  const detail = STATES.filter((s) => counts[s] > 0).map((s) => `${counts[s]} ${s}`);
  if (detail.length > 0) parts.push(detail.join(', '));
  if (model.unreadable > 0) {
    parts.push(`${model.unreadable} unreadable record ${model.unreadable === 1 ? 'file' : 'files'}`);
  }
  if (shown !== undefined && ui.filter.value !== 'all') parts.push(`${shown} shown`);
  if (!model.live && total > 0) parts.push('last known state');
  ui.summary.textContent = parts.join(' · ');
}

// Uptime, ticking: "42s", "12m 05s", "3h 07m", "2d 4h". A gone process has none.
function formatUptime(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const pad = (n) => String(n).padStart(2, '0');
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

function tickRow(row, session, now) {
  const started = Date.parse(session.started_at);
  const text = stateOf(session) === 'gone' || Number.isNaN(started)
    ? '—' : formatUptime(now - started);
  if (row.cells.uptime.textContent !== text) row.cells.uptime.textContent = text;
}

function tickAll() {
  const now = Date.now();
  for (const [id, row] of rows) {
    const session = model.sessions.get(id);
    if (session) tickRow(row, session, now);
  }
}

// ---------------------------------------------------------------------------------------------
// Stop and Kill
// ---------------------------------------------------------------------------------------------

// Ask first, in a modal dialog (Escape or Cancel says no; the focus starts on Cancel).
function confirmAction(kind, session) {
  const name = session.capsule_name || 'this capsule';
  const who = `${name} (session ${session.session_id}, pid ${session.pid})`;
  if (kind === 'stop') {
    ui.dialogTitle.textContent = `Stop ${name}?`;
    ui.dialogText.textContent = `The registry sends SIGTERM to ${who}, waits up to 10 seconds ` +
      'for it to end, then sends SIGKILL if it is still the same process.';
    ui.dialogOk.textContent = 'Stop';
  } else {
    ui.dialogTitle.textContent = `Kill ${name}?`;
    ui.dialogText.textContent = `The registry sends SIGKILL to ${who} at once: the capsule ` +
      'gets no chance to finish its work or clean up.';
    ui.dialogOk.textContent = 'Kill';
  }
  if (typeof ui.dialog.showModal !== 'function') {
    return Promise.resolve(window.confirm(`${ui.dialogTitle.textContent}\n\n${ui.dialogText.textContent}`));
  }
  return new Promise((resolve) => {
    ui.dialog.returnValue = '';
    ui.dialog.addEventListener('close', () => resolve(ui.dialog.returnValue === 'ok'), { once: true });
    ui.dialog.showModal();
    ui.dialogCancel.focus();
  });
}

async function requestAction(kind, id, button) {
  const session = model.sessions.get(id);
  if (!session || model.busy.has(id)) return;
  const confirmed = await confirmAction(kind, session);
  // Give the focus back to the button that opened the dialog, if its row is still here.
  if (button.isConnected) button.focus();
  if (!confirmed) return;
  const name = `${session.capsule_name || 'session'} (${id})`;
  model.busy.set(id, kind);
  render();
  announce(kind === 'stop' ? `Stopping ${name}…` : `Killing ${name}…`, 'info');
  const path = `/sessions/${encodeURIComponent(id)}/` + (kind === 'stop' ? 'stop' : 'signal');
  const init = { method: 'POST', cache: 'no-store', credentials: 'omit' };
  if (kind === 'stop') {
    init.headers = authHeaders({ Accept: 'application/json' });
  } else {
    init.headers = authHeaders({ Accept: 'application/json', 'Content-Type': 'application/json' });
    init.body = JSON.stringify({ signal: 'SIGKILL' });
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    finishAction(id);
    announce(`Could not reach the registry to ${kind} ${name}. Nothing was confirmed.`, 'error');
    return;
  }
  if (response.status === 401) {
    tokenRefused();
    return;
  }
  const body = await readJson(response);
  finishAction(id);
  if (response.ok) {
    announce(describeSuccess(kind, name, body), 'ok');
  } else {
    const detail = (body && body.detail) || response.statusText || 'no detail';
    // 410: the process had already ended, which is what was wanted.
    const tone = response.status === 410 ? 'info' : 'error';
    announce(`Could not ${kind} ${name} (${response.status}): ${detail}`, tone);
  }
}

function finishAction(id) {
  model.busy.delete(id);
  render();
}

function describeSuccess(kind, name, body) {
  if (!body) return `${kind === 'stop' ? 'Stopped' : 'Killed'} ${name}.`;
  if (body.outcome === 'already_gone') {
    return `${name} had already ended; its record was removed.`;
  }
  if (kind === 'stop') {
    const ms = body.waited_ms;
    const waited = typeof ms !== 'number' ? ''
      : ms < 1000 ? ` after ${Math.round(ms)} ms` : ` after ${(ms / 1000).toFixed(1)} s`;
    const how = body.signal_sent === 'SIGKILL'
      ? 'with SIGKILL (it did not end on SIGTERM)' : `with ${body.signal_sent || 'SIGTERM'}`;
    return `Stopped ${name} ${how}${waited}.`;
  }
  return `Sent SIGKILL to ${name}.`;
}

async function readJson(response) {
  try {
    return await response.json();
  } catch {
    return null;
  }
}

async function problemDetail(response) {
  const body = await readJson(response);
  return body && typeof body.detail === 'string' ? body.detail : '';
}

// ---------------------------------------------------------------------------------------------
// Wiring
// ---------------------------------------------------------------------------------------------

ui.loginForm.addEventListener('submit', (event) => {
  // Handled here; the form never submits anywhere (the page's CSP forbids it anyway).
  event.preventDefault();
  let token = ui.token.value.trim();
  // Accept a pasted header value as well as the bare token.
  if (/^bearer\s+/i.test(token)) token = token.replace(/^bearer\s+/i, '');
  if (!token) {
    showLogin('Paste the token first.');
    return;
  }
  if (!/^[\x21-\x7e]+$/.test(token)) {
    showLogin('That does not look like a token: it has spaces or unusual characters.');
    return;
  }
  ui.token.value = '';
  ui.loginError.hidden = true;
  setToken(token);
  stream.backoff = BACKOFF_FIRST_MS;
  connect();
});

ui.forget.addEventListener('click', () => {
  disconnect();
  setToken(null);
  clearTable();
  setConnection('idle', 'Not connected');
  showLogin();
});

ui.retry.addEventListener('click', () => {
  stream.backoff = BACKOFF_FIRST_MS;
  connect();
});

ui.filter.addEventListener('change', applyFilter);

ui.dialogOk.addEventListener('click', () => ui.dialog.close('ok'));
ui.dialogCancel.addEventListener('click', () => ui.dialog.close('cancel'));

ui.rows.addEventListener('animationend', (event) => {
  if (event.target instanceof HTMLElement) event.target.classList.remove('flash');
});

// Back online: no need to wait for the backoff.
window.addEventListener('online', () => {
  if (getToken() && !model.live) connect();
});

setInterval(tickAll, 1000);

if (getToken()) {
  connect();
} else {
  setConnection('idle', 'Not connected');
  showLogin();
}
