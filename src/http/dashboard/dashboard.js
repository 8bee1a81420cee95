// The murmur registry dashboard: the live table of capsule sessions, from GET /events (this
// host) or GET /fleet/events (every host of the registry's fleet, with a host column).
//
// Rules this file keeps:
// - The token lives in sessionStorage (this tab only) and travels only in an Authorization
//   header to this page's own origin: never in a URL, a cookie or persistent local storage.
//   A login link (`murmur-registry dashboard`) brings it in the fragment (`#token=…`, which no
//   browser sends): it is taken from there before anything else runs and the address bar is
//   rewritten at once without it, leaving the fragment's route (`#fleet`) in place.
// - The table paints at once from a listing that asks no door (`/sessions?probe=false`), each
//   row whose door is still being asked marked so; the live view's snapshot then replaces it
//   with the verdicts. A listing that answers after the snapshot is dropped.
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
// - The fleet view shows other hosts' sessions as their registries published them: untrusted
//   data, shown as text like the rest. Stop and Kill exist only on rows of this registry's own
//   host (the `host_id` of the fleet snapshot), and always go to this registry. A fleet that
//   cannot be read is shown greyed out as the last one seen, never as the current one.
// - CPU and memory come from the `resources` event the host view's stream asks for
//   (`?include=resources`), once per interval: they update their two cells in place, never
//   the rest of the row, and a session the latest event does not name shows none.
'use strict';

const TOKEN_KEY = 'murmur-registry.token';
// The server sends a keep-alive comment every 15 s: three missed ones mean a dead stream.
const STALL_MS = 45000;
const BACKOFF_FIRST_MS = 1000;
const BACKOFF_MAX_MS = 30000;
const STATES = ['live', 'unreachable', 'gone'];
// The two views: one registry's own sessions, or its fleet's. The fleet view is `#fleet`.
const VIEWS = {
  host: { path: '/events?include=resources', title: 'Sessions', where: 'on this machine' },
  fleet: { path: '/fleet/events', title: 'Fleet sessions', where: 'in the fleet' },
};
const FLEET_HASH = '#fleet';

// The token a login link brought in the fragment, taken out of the address bar before the
// view is read from it. The fragment's other parts (its route) stay.
const LINKED_TOKEN = takeLinkedToken();

function takeLinkedToken() {
  const parts = location.hash.replace(/^#/, '').split('&');
  const given = parts.find((part) => part.startsWith('token='));
  if (given === undefined) return null;
  const rest = parts.filter((part) => !part.startsWith('token=') && part !== '');
  history.replaceState(null, '', location.pathname + location.search +
    (rest.length ? '#' + rest.join('&') : ''));
  try {
    const token = decodeURIComponent(given.slice('token='.length)).trim();
    return /^[\x21-\x7e]+$/.test(token) ? token : null;
  } catch {
    return null;
  }
}

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
  title: $('sessions-title'),
  caption: $('caption'),
  scopeHost: $('scope-host'),
  scopeFleet: $('scope-fleet'),
  scopeNote: $('scope-note'),
  hostStrip: $('host-strip'),
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
  view: location.hash === FLEET_HASH ? 'fleet' : 'host',
  sessions: new Map(), // keyOf(session) -> Session, as the registry sent it
  unreadable: 0,
  busy: new Map(), // keyOf(session) -> 'stop' | 'kill' while a request is in flight
  live: false, // whether the table reflects a stream that is open right now
  asking: false, // whether the table is the no-door listing, the doors' verdicts to come
  ownHost: null, // fleet view: this registry's host id, as its fleet snapshot names it
  hosts: new Map(), // fleet view: host_id -> its host entry
  resources: new Map(), // host view: session_id -> its `resources`, from the latest event
};
const rows = new Map(); // keyOf(session) -> { tr, cells }
// Whether this registry serves a fleet: 'unknown' until it says, 'configured' (even while
// etcd is unreachable) or 'off' (started without --fleet-etcd; `reason` in its words).
const fleet = { state: 'unknown', reason: '' };

// A session's key in the table: its id on one host; its host and id in the fleet, where two
// hosts' ids are not known to differ.
function keyOf(session) {
  return model.view === 'fleet'
    ? JSON.stringify([String(session.host_id ?? ''), String(session.session_id)])
    : session.session_id;
}

// Whether Stop and Kill belong on this session's row: every row of this host's own view; in
// the fleet, only the rows of this registry's own host.
function isOwn(session) {
  return model.view === 'host' || (model.ownHost !== null && session.host_id === model.ownHost);
}

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
  askedFleet: false, // whether this connection asked if the registry has a fleet
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
  stream.askedFleet = false;
  setConnection('connecting', 'Connecting…');
  if (model.view === 'host') paintAtOnce(controller);
  let response;
  try {
    response = await fetch(VIEWS[model.view].path, {
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
    tokenRefused((await readProblem(response)).detail);
    return;
  }
  if (!response.ok || !response.body) {
    const { type, detail } = await readProblem(response);
    if (model.view === 'fleet' && response.status === 404) {
      // No fleet here (any more): say why beside the switch and show this host instead.
      fleetIs('off', detail || `the registry answered 404 (${type || 'no detail'})`);
      switchTo('host');
      announce(`The fleet view is off: ${fleet.reason}.`, 'info');
      return;
    }
    if (model.view === 'fleet' && response.status === 503 && detail) {
      fleetIs('configured');
      lost(`The registry cannot serve the fleet: ${detail}.`, 'Fleet unavailable, retrying…',
        retryAfterMs(response));
    } else if (response.status === 503 && detail) {
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
    // Only the current connection's events count: a switch of view may leave an old one's
    // last chunk in flight.
    lastWords = await readEvents(response.body, controller, (name, data) => {
      if (stream.controller === controller) dispatch(name, data);
    });
  } catch {
    // A reset connection, an aborted read or the stall watchdog: handled below.
  }
  if (controller.signal.aborted && stream.controller !== controller) return;
  lost(lastWords ? `The registry ended the stream: ${lastWords.replace(/^stream ended:\s*/, '')}.`
    : 'The connection to the registry closed.',
  lastWords && model.view === 'fleet' ? 'Fleet stream ended, reconnecting…' : undefined);
}

// The layers-1–2 picture (no door asked: it answers in milliseconds), painted while the
// stream's first snapshot waits for the slowest door. Dropped once that snapshot is here, or
// when this connection is no longer the current one; a refusal is the stream's to report.
async function paintAtOnce(controller) {
  let body = null;
  try {
    const response = await fetch('/sessions?probe=false', {
      headers: authHeaders({ Accept: 'application/json' }),
      cache: 'no-store',
      credentials: 'omit',
      signal: controller.signal,
    });
    if (response.ok) body = await readJson(response);
  } catch {
    return;
  }
  if (stream.controller !== controller || model.live || !body || !Array.isArray(body.sessions)) {
    return;
  }
  model.sessions = new Map();
  for (const session of body.sessions) {
    if (session && session.session_id) model.sessions.set(keyOf(session), session);
  }
  model.unreadable = Number(body.unreadable) || 0;
  model.asking = true;
  document.body.classList.remove('stale');
  hideBanner();
  showSessions();
  setConnection('connecting', 'Connected, asking doors…');
  render();
  // For whoever measures how soon rows show (the browser test does).
  performance.mark('murmur.rows-painted');
}

// The stream ended or never started: keep the table (marked stale) and try again later, each
// failure waiting longer (with some jitter, so many tabs do not retry in step).
function lost(why, status = 'Registry unreachable, reconnecting…', notBeforeMs = 0) {
  if (stream.controller) stream.controller.abort();
  stream.controller = null;
  model.live = false;
  model.asking = false;
  document.body.classList.add('stale');
  // Jitter on whichever wait wins, so tabs told the same Retry-After do not retry in step.
  const delay = Math.round(Math.max(notBeforeMs, stream.backoff) * (1 + Math.random() * 0.3));
  stream.backoff = Math.min(stream.backoff * 2, BACKOFF_MAX_MS);
  setConnection('down', status);
  showBanner(`${why} Reconnecting automatically (next try in ${Math.ceil(delay / 1000)} s); ` +
    (model.view === 'fleet' ? 'the table shows the last fleet seen, which may no longer be ' +
      'current.' : 'the table shows the last state seen.'));
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

// `why`: the 401's own reason, when it gave one.
function tokenRefused(why) {
  disconnect();
  setToken(null);
  clearTable();
  fleetIs('unknown');
  setConnection('refused', 'Token refused');
  showLogin(`The registry refused that token${why ? ` (${why})` : ''}. Paste the current ` +
    'one: it may have been mistyped, or rotated with "murmur-registry token --rotate".');
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
        const key = keyOf(payload.session);
        const changed = model.sessions.has(key);
        model.sessions.set(key, payload.session);
        render();
        if (changed) flash(key);
      }
      break;
    case 'session.removed':
      model.sessions.delete(keyOf(payload));
      model.busy.delete(keyOf(payload));
      render();
      break;
    case 'host.joined':
    case 'host.changed':
      if (model.view === 'fleet' && typeof payload.host_id === 'string') {
        model.hosts.set(payload.host_id, payload.host || { host_id: payload.host_id });
        renderSummary();
      }
      break;
    case 'host.left':
      // The registry sends its sessions' removals first; this makes sure none is left behind.
      if (model.view === 'fleet' && typeof payload.host_id === 'string') {
        model.hosts.delete(payload.host_id);
        for (const [key, session] of model.sessions) {
          if (session.host_id === payload.host_id) model.sessions.delete(key);
        }
        render();
      }
      break;
    case 'resources':
      onResources(payload);
      break;
    default:
      // An event this page does not know yet: newer registries may add some.
      break;
  }
}

// The latest figures replace the last ones; only the CPU and memory cells change.
function onResources(payload) {
  if (model.view !== 'host') return;
  model.resources = new Map();
  for (const entry of payload.sessions || []) {
    if (entry && typeof entry.session_id === 'string' && entry.resources) {
      model.resources.set(entry.session_id, entry.resources);
    }
  }
  for (const [key, row] of rows) {
    const session = model.sessions.get(key);
    if (session) fillResources(row.cells, session);
  }
}

function onSnapshot(payload) {
  model.sessions = new Map();
  for (const session of payload.sessions || []) {
    if (session && session.session_id) model.sessions.set(keyOf(session), session);
  }
  model.unreadable = Number(payload.unreadable) || 0;
  if (model.view === 'fleet') {
    model.ownHost = typeof payload.host_id === 'string' ? payload.host_id : null;
    model.hosts = new Map();
    for (const host of payload.hosts || []) {
      if (host && typeof host.host_id === 'string') model.hosts.set(host.host_id, host);
    }
    fleetIs('configured');
  }
  model.live = true;
  model.asking = false;
  stream.backoff = BACKOFF_FIRST_MS;
  document.body.classList.remove('stale');
  hideBanner();
  showSessions();
  setConnection('live', model.view === 'fleet' ? 'Connected, live (fleet)' : 'Connected, live');
  render();
  if (model.view === 'host' && stream.controller && !stream.askedFleet) {
    stream.askedFleet = true;
    askAboutFleet(stream.controller);
  }
}

// ---------------------------------------------------------------------------------------------
// The switch: this host, or the fleet
// ---------------------------------------------------------------------------------------------

// Ask the registry whether it has a fleet (once per connection of the host view), so the
// switch offers the fleet only when there is one, and says why not when there is none.
async function askAboutFleet(controller) {
  let response;
  try {
    response = await fetch('/fleet/hosts', {
      headers: authHeaders({ Accept: 'application/json' }),
      cache: 'no-store',
      credentials: 'omit',
      signal: controller.signal,
    });
  } catch {
    return; // The next connection asks again.
  }
  if (response.ok || response.status === 503) {
    // A fleet whose etcd is unreachable is still a fleet: its view says why it is unavailable.
    fleetIs('configured');
  } else if (response.status === 404) {
    const { type, detail } = await readProblem(response);
    fleetIs('off', detail || `the registry answered 404 (${type || 'no detail'})`);
  }
}

function fleetIs(state, reason = '') {
  fleet.state = state;
  fleet.reason = reason;
  ui.scopeFleet.disabled = state !== 'configured' && model.view !== 'fleet';
  ui.scopeNote.textContent = state === 'off' ? `Fleet view off: ${reason}.` : '';
  ui.scopeNote.hidden = state !== 'off';
}

// Show `view` ('host' or 'fleet'): a fresh table from that view's stream.
function setView(view) {
  model.view = view;
  document.body.classList.toggle('view-fleet', view === 'fleet');
  ui.scopeHost.checked = view === 'host';
  ui.scopeFleet.checked = view === 'fleet';
  ui.scopeFleet.disabled = fleet.state !== 'configured' && view !== 'fleet';
  ui.title.textContent = VIEWS[view].title;
  ui.caption.textContent = `Capsule sessions ${VIEWS[view].where}, newest first`;
  const wanted = view === 'fleet' ? FLEET_HASH : '';
  if (location.hash !== wanted) {
    history.replaceState(null, '', location.pathname + location.search + wanted);
  }
}

function switchTo(view) {
  if (view === model.view) return;
  setView(view);
  hideBanner();
  clearTable();
  stream.backoff = BACKOFF_FIRST_MS;
  if (getToken()) connect();
}

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

function clearTable() {
  model.sessions = new Map();
  model.unreadable = 0;
  model.busy.clear();
  model.live = false;
  model.asking = false;
  model.ownHost = null;
  model.hosts = new Map();
  model.resources = new Map();
  for (const { tr } of rows.values()) tr.remove();
  rows.clear();
  announce('', 'info');
  applyFilter();
}

// A state word; `asking` for a row of the no-door listing whose process is there and whose
// door has not answered yet (its verdict comes with the stream).
function stateOf(session) {
  const liveness = session.liveness || {};
  if (STATES.includes(liveness.state)) return liveness.state;
  const waiting = liveness.state === undefined && ['alive', 'unverified'].includes(liveness.process);
  return waiting ? 'asking' : 'unknown';
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
function buildRow(key, session) {
  const tr = el('tr');
  tr.dataset.sessionId = session.session_id;
  const cell = (label, className) => {
    const td = el('td', className);
    td.dataset.label = label; // shown as a heading in the narrow, stacked layout
    tr.append(td);
    return td;
  };
  const cells = {};
  // Shown in the fleet view only (the style sheet hides the column otherwise).
  cells.host = el('span', 'host-name');
  cells.hostTag = el('span', 'host-tag', 'this host');
  cell('Host', 'col-host').append(wrap(cells.host, cells.hostTag));
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
  cells.doorScope = el('span', 'door-scope');
  cell('Door', 'col-door').append(wrap(cells.door, cells.doorScope));
  cells.pid = el('span', 'mono');
  cell('PID', 'col-pid num').append(cells.pid);
  cells.cpu = el('span', 'col-cpu mono');
  cells.mem = el('span', 'col-mem mono');
  cell('Usage', 'col-usage num').append(wrap(cells.cpu, cells.mem));
  cells.uptime = el('time', 'uptime');
  cell('Uptime', 'col-uptime').append(cells.uptime);

  cells.actions = cell('Actions', 'col-actions');
  cells.stop = el('button', 'stop', 'Stop');
  cells.stop.type = 'button';
  cells.stop.addEventListener('click', () => requestAction('stop', key, cells.stop));
  cells.kill = el('button', 'kill danger-outline', 'Kill');
  cells.kill.type = 'button';
  cells.kill.addEventListener('click', () => requestAction('kill', key, cells.kill));
  cells.remote = el('span', 'remote-note');
  return { tr, cells };
}

// Stop and Kill are in the row only when they belong there (see isOwn); another host's row
// says where its session can be stopped instead, and has no button at all.
function placeActions(cells, session) {
  const own = isOwn(session);
  if (own && !cells.stop.isConnected) {
    cells.remote.remove();
    cells.actions.append(cells.stop, cells.kill);
  } else if (!own && !cells.remote.isConnected) {
    cells.stop.remove();
    cells.kill.remove();
    cells.actions.append(cells.remote);
  }
  if (!own) {
    const host = String(session.host_id ?? 'another host');
    cells.remote.textContent = `on host ${host}`;
    cells.remote.title = `Stop and Kill go through host ${host}'s own registry`;
  }
}

const STATE_ICONS = { live: '●', unreachable: '◐', gone: '○', asking: '…', unknown: '?' };
const STATE_TEXT = { asking: 'asking door' };

function fillRow(row, session) {
  const { tr, cells } = row;
  const state = stateOf(session);
  tr.dataset.state = state;
  const host = String(session.host_id ?? '');
  tr.dataset.hostId = host;
  cells.host.textContent = host;
  cells.hostTag.hidden = !(model.view === 'fleet' && host === model.ownHost);
  cells.badge.className = `badge badge-${state}`;
  cells.badgeIcon.textContent = STATE_ICONS[state];
  cells.badgeText.textContent = STATE_TEXT[state] || state;
  tr.setAttribute('aria-busy', state === 'asking' ? 'true' : 'false');
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
  // A door on loopback answers only on its own host (`door_scope`): say so, naming the host.
  const hostOnly = model.view === 'fleet' && session.door_scope === 'host' && session.url != null;
  cells.doorScope.textContent = hostOnly ? `only from ${host}` : '';
  cells.doorScope.hidden = !hostOnly;
  cells.pid.textContent = String(session.pid ?? '');
  fillResources(cells, session);
  cells.uptime.dateTime = String(session.started_at ?? '');
  cells.uptime.title = session.started_at ? `started ${session.started_at}` : '';
  tickRow(row, session, Date.now());

  placeActions(cells, session);
  const busy = model.busy.get(keyOf(session));
  cells.stop.disabled = Boolean(busy);
  cells.kill.disabled = Boolean(busy);
  cells.stop.textContent = busy === 'stop' ? 'Stopping…' : 'Stop';
  cells.kill.textContent = busy === 'kill' ? 'Killing…' : 'Kill';
  const who = `${name || 'session'} ${session.session_id}`;
  cells.stop.setAttribute('aria-label', `Stop ${who}`);
  cells.kill.setAttribute('aria-label', `Kill ${who}`);
}

// CPU (share of one core over the last interval) and resident memory, from the latest
// `resources` event; a dash where there is no figure.
function fillResources(cells, session) {
  const figures = model.resources.get(session.session_id);
  const cpu = figures && typeof figures.cpu_percent === 'number'
    ? `${figures.cpu_percent.toFixed(1)}%` : '—';
  const mem = figures && typeof figures.rss_bytes === 'number' ? formatBytes(figures.rss_bytes) : '—';
  if (cells.cpu.textContent !== cpu) cells.cpu.textContent = cpu;
  if (cells.mem.textContent !== mem) cells.mem.textContent = mem;
  cells.cpu.title = figures ? `${figures.threads} threads, ${figures.cpu_time_ms} ms of CPU in all` : '';
}

// Bytes in binary units: "812 KiB", "73.4 MiB", "1.2 GiB".
function formatBytes(bytes) {
  if (bytes < 1024 * 1024) return `${Math.round(bytes / 1024)} KiB`;
  if (bytes < 1024 * 1024 * 1024) return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
  return `${(bytes / (1024 * 1024 * 1024)).toFixed(1)} GiB`;
}

function render() {
  const sessions = [...model.sessions.values()].sort(newestFirst);
  for (const [key, row] of rows) {
    if (!model.sessions.has(key)) removeRow(key, row);
  }
  sessions.forEach((session, index) => {
    const key = keyOf(session);
    let row = rows.get(key);
    if (!row) {
      row = buildRow(key, session);
      rows.set(key, row);
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
    ui.empty.textContent = total > 0 ? `No ${wanted} sessions; ${total} hidden by the filter.`
      : model.live || model.asking ? `No capsule sessions are running ${VIEWS[model.view].where}.`
        : 'Nothing to show until the registry answers.';
  }
  renderSummary(shown);
}

function renderSummary(shown) {
  const counts = { live: 0, unreachable: 0, gone: 0, asking: 0, unknown: 0 };
  for (const session of model.sessions.values()) counts[stateOf(session)] += 1;
  const total = model.sessions.size;
  const parts = [`${total} ${total === 1 ? 'session' : 'sessions'}`];
  if (model.view === 'fleet' && model.live) {
    const hosts = model.hosts.size;
    parts[0] += ` on ${hosts} ${hosts === 1 ? 'host' : 'hosts'}`;
  }
  const detail = STATES.filter((s) => counts[s] > 0).map((s) => `${counts[s]} ${s}`);
  if (counts.asking > 0) detail.push(`${counts.asking} asking ${counts.asking === 1 ? 'its door' : 'their doors'}`);
  if (detail.length > 0) parts.push(detail.join(', '));
  if (model.unreadable > 0) {
    parts.push(`${model.unreadable} unreadable record ${model.unreadable === 1 ? 'file' : 'files'}`);
  }
  if (shown !== undefined && ui.filter.value !== 'all') parts.push(`${shown} shown`);
  if (!model.live && !model.asking && total > 0) parts.push('last known state');
  ui.summary.textContent = parts.join(' · ');
  renderHosts();
}

// The fleet view's strip of hosts, in id order: each host's sessions here, its load average
// over a minute against its CPUs, and its memory available. Rebuilt only when its text changes.
let shownHosts = '';
function renderHosts() {
  const hosts = model.view === 'fleet' ? [...model.hosts.values()] : [];
  hosts.sort((a, b) => (a.host_id < b.host_id ? -1 : a.host_id > b.host_id ? 1 : 0));
  const sessions = new Map();
  for (const session of model.sessions.values()) {
    sessions.set(session.host_id, (sessions.get(session.host_id) || 0) + 1);
  }
  const items = hosts.map((host) => hostFacts(host, sessions.get(host.host_id) || 0));
  const text = JSON.stringify(items);
  if (text === shownHosts) return;
  shownHosts = text;
  ui.hostStrip.hidden = items.length === 0;
  ui.hostStrip.replaceChildren(...items.map((facts) => {
    const li = document.createElement('li');
    li.className = 'host-card';
    li.dataset.host = facts.id;
    const head = el('span', 'host-head');
    head.append(el('strong', '', facts.id));
    if (facts.own) head.append(el('span', 'host-tag', 'this host'));
    li.append(head);
    for (const fact of facts.lines) {
      const span = document.createElement('span');
      span.className = 'host-fact';
      span.textContent = fact;
      li.append(span);
    }
    return li;
  }));
}

// What the strip says of `host`: untrusted values (another host wrote them) go out as text.
function hostFacts(host, sessions) {
  const lines = [`${sessions} ${sessions === 1 ? 'session' : 'sessions'}`];
  const load = host.load;
  const number = (value) => typeof value === 'number' && Number.isFinite(value) && value >= 0;
  if (load && number(load.load_1m) && number(load.cpus)) {
    lines.push(`load ${load.load_1m.toFixed(2)} on ${load.cpus} ${load.cpus === 1 ? 'CPU' : 'CPUs'}`);
  } else {
    lines.push('load not reported');
  }
  if (load && number(load.memory_available_bytes) && number(load.memory_total_bytes)) {
    lines.push(`${formatBytes(load.memory_available_bytes)} of ${formatBytes(load.memory_total_bytes)} free`);
  }
  return { id: String(host.host_id), own: host.host_id === model.ownHost, lines };
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
  for (const [key, row] of rows) {
    const session = model.sessions.get(key);
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
    ui.dialogText.textContent = `The registry asks ${who} to cancel its tasks, sends it ` +
      'SIGTERM, waits up to 10 seconds for it to end, then sends SIGKILL if it is still the ' +
      'same process.';
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

// `key` names the row; the request names the session by its id, to this registry, and is
// never sent for another host's session.
async function requestAction(kind, key, button) {
  const session = model.sessions.get(key);
  if (!session || !isOwn(session) || model.busy.has(key)) return;
  const view = model.view;
  const confirmed = await confirmAction(kind, session);
  // Give the focus back to the button that opened the dialog, if its row is still here.
  if (button.isConnected) button.focus();
  // Not if the view changed meanwhile (its keys, and what is own, are another view's).
  if (!confirmed || model.view !== view) return;
  const id = session.session_id;
  const name = `${session.capsule_name || 'session'} (${id})`;
  model.busy.set(key, kind);
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
    finishAction(key);
    announce(`Could not reach the registry to ${kind} ${name}. Nothing was confirmed.`, 'error');
    return;
  }
  if (response.status === 401) {
    tokenRefused((await readProblem(response)).detail);
    return;
  }
  const body = await readJson(response);
  finishAction(key);
  if (response.ok) {
    announce(describeSuccess(kind, name, body), 'ok');
  } else {
    const detail = (body && body.detail) || response.statusText || 'no detail';
    // 410: the process had already ended, which is what was wanted.
    const tone = response.status === 410 ? 'info' : 'error';
    const door = kind === 'stop' && body ? describeDoor(body.door) : '';
    const said = door ? `${detail}.${door}` : detail;
    announce(`Could not ${kind} ${name} (${response.status}): ${said}`, tone);
  }
}

function finishAction(key) {
  model.busy.delete(key);
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
    return `Stopped ${name} ${how}${waited}.${describeDoor(body.door)}`;
  }
  return `Sent SIGKILL to ${name}.`;
}

// What the capsule's door said when the stop asked it first (the answer's `door`), as
// sentences to append: what it canceled and left running, or why it did not help. Kill never
// asks the door (it is a signal, not a stop).
function describeDoor(door) {
  if (!door || typeof door !== 'object') return '';
  const items = (list) => (Array.isArray(list) ? list : []).map(
    (item) => (typeof item === 'string' ? item : JSON.stringify(item)));
  if (door.outcome === 'answered') {
    const canceled = items(door.canceled);
    const residue = items(door.residue);
    const said = canceled.length ? ` Canceled: ${canceled.join(', ')}.` : ' Nothing to cancel.';
    return residue.length ? `${said} Left running: ${residue.join('; ')}.` : said;
  }
  const unhelpful = ['refused', 'no_answer', 'mismatch', 'not_live'];
  if (unhelpful.includes(door.outcome) && typeof door.reason === 'string') {
    return ` Door: ${door.reason}.`;
  }
  return '';
}

async function readJson(response) {
  try {
    return await response.json();
  } catch {
    return null;
  }
}

// A problem answer's `type` (its last word, e.g. `fleet-not-configured`) and `detail`.
async function readProblem(response) {
  const body = await readJson(response);
  const text = (field) => (body && typeof body[field] === 'string' ? body[field] : '');
  return { type: text('type').split(':').pop(), detail: text('detail') };
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
  fleetIs('unknown');
  setConnection('idle', 'Not connected');
  showLogin();
});

ui.retry.addEventListener('click', () => {
  stream.backoff = BACKOFF_FIRST_MS;
  connect();
});

ui.filter.addEventListener('change', applyFilter);

for (const radio of [ui.scopeHost, ui.scopeFleet]) {
  radio.addEventListener('change', () => {
    if (radio.checked) switchTo(radio.value);
  });
}
window.addEventListener('hashchange', () => {
  switchTo(location.hash === FLEET_HASH ? 'fleet' : 'host');
});

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

if (LINKED_TOKEN) setToken(LINKED_TOKEN);

setView(model.view);

if (getToken()) {
  connect();
} else {
  setConnection('idle', 'Not connected');
  showLogin();
}
