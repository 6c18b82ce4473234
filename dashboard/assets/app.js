// fleetmgr dashboard. Plain JavaScript, no dependency. Every value from a
// fleet is set with textContent or setAttribute, never parsed as HTML (the
// page's CSP requires Trusted Types with no policy, so an HTML sink would
// throw). Data: GET /api/snapshot, then Server-Sent Events on /events
// (resumed by the browser with Last-Event-ID) and /api/logs, held for every
// tab of the browser by one shared worker (worker.js; a browser without
// SharedWorker opens them itself). The only timer is a local one-second
// clock for ages and countdowns: nothing polls.
'use strict';

const VERDICTS = ['WORKING', 'STALLED', 'IDLE', 'BLOCKED', 'UNKNOWN', 'REMOTE'];
const LETTER = { W: 'WORKING', S: 'STALLED', I: 'IDLE', B: 'BLOCKED', U: 'UNKNOWN', R: 'REMOTE' };
const STATES = ['running', 'starting', 'restarting', 'stopping', 'failed', 'stopped', 'remote', 'unknown'];
const VERB_TEXT = {
  start: 'Starts its herdr session, then fleetd, and waits until /healthz answers with the fleet\'s name. Starting a running fleet changes nothing.',
  restart: 'Stops fleetd (SIGTERM, grace, SIGKILL) and starts it again, keeping the herdr session when it answers. Clears a crash loop.',
  stop: 'Stops fleetd, then its herdr session and every process in its panes: the members\' agents end. The broker vhost and its queued messages are kept.',
};
const AXIS_SPAN_MS = 3600 * 1000; // restarts axis: the last hour

const csrf = document.querySelector('meta[name="fleetmgr-csrf"]').getAttribute('content');
const el = {
  fleets: document.getElementById('fleets'),
  empty: document.getElementById('empty'),
  conn: document.getElementById('conn'),
  sampled: document.getElementById('sampled'),
  result: document.getElementById('result'),
  hosts: document.getElementById('hosts'),
  configError: document.getElementById('config-error'),
  hostList: document.getElementById('host-list'),
  dialog: document.getElementById('confirm'),
  dTitle: document.getElementById('confirm-title'),
  dText: document.getElementById('confirm-text'),
  dLeadRow: document.getElementById('confirm-lead-row'),
  dLead: document.getElementById('confirm-lead'),
  dOK: document.getElementById('confirm-ok'),
  dCancel: document.getElementById('confirm-cancel'),
  tFleet: document.getElementById('t-fleet'),
  tMember: document.getElementById('t-member'),
  summary: document.getElementById('summary'),
  viewToggle: document.getElementById('view-toggle'),
  notifyAllow: document.getElementById('notify-allow'),
  compact: document.getElementById('compact'),
  compactRows: document.getElementById('compact-rows'),
};

// The page's model: what the last snapshot and events said.
const st = {
  report: null, // status report header (fleets kept in rows)
  rows: new Map(), // fleet name → status row
  meta: new Map(), // fleet name → {as_of, sampled_at, restarts}
  timelines: new Map(), // fleet name → {times: [], members: Map(id → string)}
  calls: { times: [], period_ms: 5000, fleets: new Map() },
  limits: { timeline: 60, restart_marks: 20, log_lines: 100 },
  views: new Map(), // fleet name → view (DOM refs)
  logs: new Map(), // fleet name → lines
  busy: new Set(), // fleets with an action under way from this page
  logNames: '',
  epoch: '', // the serve's event epoch and the last event applied (ids "epoch.seq")
  seq: -1,
};

// ---- small helpers ---------------------------------------------------------

// crashLoopText is a crash loop's one sentence: the recorded error, which
// already starts "crash loop: N restarts within …" and says how to get out
// (lifecycle's crashLoopError), shown as it is, never under a second
// "crash loop" label (issue 24 item 8).
function crashLoopText(row) {
  const e = row.last_error || '';
  if (e.toLowerCase().startsWith('crash loop')) return e;
  return 'crash loop' + (e ? `; last error: ${e}` : `: too many restarts; \`fleetmgr start ${row.name}\` or \`fleetmgr restart ${row.name}\``);
}

function setText(node, s) {
  s = s == null ? '' : String(s);
  if (node.textContent !== s) node.textContent = s;
}
function setAttr(node, k, v) {
  v = String(v);
  if (node.getAttribute(k) !== v) node.setAttribute(k, v);
}
function one(root, sel) { return root.querySelector(sel); }
function svgEl(name) { return document.createElementNS('http://www.w3.org/2000/svg', name); }
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
// A class from a closed list only: fleet data never becomes a class name.
function pick(list, v, fallback) { return list.includes(v) ? v : fallback; }

function fmtDur(s) {
  if (!(s >= 0)) return '-';
  if (s < 10) return (Math.round(s * 10) / 10) + 's';
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  if (h) return `${h}h${m}m${sec}s`;
  if (m) return `${m}m${sec}s`;
  return `${sec}s`;
}
// cpuText and memText are the CPU and MEM cells, as `fleetmgr status`
// prints them (status.CPUText, status.MemText): percent of one core over
// the last interval, resident memory in binary units; '-' when not
// measured.
function cpuText(u) {
  if (!u || u.cpu_percent == null) return '-';
  return u.cpu_percent >= 100 ? `${Math.round(u.cpu_percent)}%` : `${u.cpu_percent.toFixed(1)}%`;
}
function memText(u) {
  if (!u) return '-';
  let b = u.rss_bytes || 0;
  for (const unit of ['K', 'M', 'G']) {
    b /= 1024;
    if (b < 1024 || unit === 'G') return b < 10 && unit !== 'K' ? `${b.toFixed(1)}${unit}` : `${Math.round(b)}${unit}`;
  }
  return '-';
}
function resText(u) {
  if (!u) return '-';
  return `${cpuText(u)} CPU, ${memText(u)} RSS, ${u.procs} proc${u.procs === 1 ? '' : 's'}, ${u.fds} fds`;
}

// sampleAge is a fleet's sample age in seconds (null: not sampled yet)
// and whether it is stale: older than two sampling intervals (issue 24
// item 16).
function sampleAge(name) {
  const meta = st.meta.get(name);
  const interval = (st.report && st.report.interval_ms) || 0;
  const at = meta && meta.sampled_at ? Date.parse(meta.sampled_at) : NaN;
  const age = Number.isNaN(at) ? null : Math.max(0, (Date.now() - at) / 1000);
  return { age, interval, stale: age != null && interval > 0 && age * 1000 > 2 * interval };
}

// compactAge writes a compact row's sample age and greys it when stale,
// as the card does.
function compactAge(tr, name) {
  const row = st.rows.get(name);
  const a = sampleAge(name);
  const sampled = row && row.state === 'running' && !isRemote(row);
  const stale = sampled && a.stale;
  setAttr(tr, 'data-stale', String(stale));
  setAttr(tr, 'data-sample-age', sampled && a.age != null ? String(Math.floor(a.age)) : '');
  setText(tr.children[10], !sampled ? '-' : a.age == null ? 'not yet' : `${fmtDur(a.age)} ago` + (stale ? ' (stale)' : ''));
}

function clock(ms) {
  const d = new Date(ms);
  const p = (n) => String(n).padStart(2, '0');
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}
function since(iso) { return (Date.now() - Date.parse(iso)) / 1000; }
// A fleet of another host: shown from its presence (row.remote, with a
// federation) or declared there and never probed (REMOTE); dimmed, without
// actions.
function isRemote(row) { return !!row.remote || row.state === 'remote' || row.verdict === 'REMOTE'; }
const HOST_STATES = ['online', 'expired', 'offline', 'never-seen'];
function seenText(iso) { return iso ? `last seen ${fmtDur(Math.max(0, since(iso)))} ago` : 'never seen'; }

// ---- model updates ---------------------------------------------------------

function applySnapshot(s) {
  st.report = s.report;
  st.limits = Object.assign(st.limits, s.limits || {});
  st.rows = new Map();
  st.meta = new Map();
  st.timelines = new Map();
  for (const row of s.report.fleets) {
    st.rows.set(row.name, row);
    st.meta.set(row.name, (s.meta && s.meta[row.name]) || { restarts: [] });
    const tl = (s.timelines && s.timelines[row.name]) || { times: [], members: {} };
    st.timelines.set(row.name, {
      times: tl.times.slice(), members: new Map(Object.entries(tl.members || {})),
      cpu: (tl.cpu_percent || []).slice(), rss: (tl.rss_bytes || []).slice(),
    });
  }
  const c = s.calls || { times: [], period_ms: 5000, fleets: {} };
  st.calls = { times: c.times.slice(), period_ms: c.period_ms, fleets: new Map(Object.entries(c.fleets || {})) };
  renderAll();
  openLogs();
}

function onFederation(d) {
  st.report = Object.assign({}, st.report || {}, { federation: d.federation || undefined });
  renderHeader();
}

function onFleet(d) {
  st.rows.set(d.row.name, d.row);
  st.meta.set(d.row.name, d.meta);
  renderFleet(d.row.name);
}

// A sampling: rows replaced, one verdict sample per member appended, as the
// server appends it (hub.sampleLocked), so a reload shows the same history.
function onReport(d) {
  const rep = d.report;
  st.report = Object.assign({}, rep, { fleets: undefined });
  const t = Date.parse(rep.generated_at);
  for (const row of rep.fleets) {
    st.rows.set(row.name, row);
    if (d.meta && d.meta[row.name]) st.meta.set(row.name, d.meta[row.name]);
    let tl = st.timelines.get(row.name);
    if (!tl) { tl = { times: [], members: new Map(), cpu: [], rss: [] }; st.timelines.set(row.name, tl); }
    const n = tl.times.length;
    tl.times.push(t);
    const u = row.resources;
    tl.cpu.push(u && u.cpu_percent != null ? u.cpu_percent : null);
    tl.rss.push(u ? u.rss_bytes : 0);
    const present = new Set();
    for (const m of row.members || []) {
      if (present.has(m.id)) continue;
      present.add(m.id);
      const letter = Object.keys(LETTER).find((k) => LETTER[k] === m.verdict) || '?';
      tl.members.set(m.id, (tl.members.get(m.id) || '-'.repeat(n)) + letter);
    }
    for (const [id, s] of tl.members) if (!present.has(id)) tl.members.set(id, s + '-');
    const drop = tl.times.length - st.limits.timeline;
    if (drop > 0) {
      tl.times = tl.times.slice(drop);
      tl.cpu = tl.cpu.slice(drop);
      tl.rss = tl.rss.slice(drop);
      for (const [id, s] of tl.members) {
        const k = s.slice(drop);
        if (/^-*$/.test(k)) tl.members.delete(id); else tl.members.set(id, k);
      }
    }
    renderFleet(row.name);
  }
  renderHeader();
}

function onCalls(d) {
  const c = st.calls;
  c.times.push(d.t);
  for (const name of st.rows.keys()) {
    let s = c.fleets.get(name);
    if (!s) {
      const k = c.times.length - 1;
      s = { calls: Array(k).fill(0), errors: Array(k).fill(0), p50_ms: Array(k).fill(null) };
      c.fleets.set(name, s);
    }
    const p = (d.fleets && d.fleets[name]) || { calls: 0, errors: 0, p50_ms: null };
    s.calls.push(p.calls); s.errors.push(p.errors); s.p50_ms.push(p.p50_ms);
  }
  const drop = c.times.length - st.limits.timeline;
  if (drop > 0) {
    c.times = c.times.slice(drop);
    for (const s of c.fleets.values()) {
      s.calls = s.calls.slice(drop); s.errors = s.errors.slice(drop); s.p50_ms = s.p50_ms.slice(drop);
    }
  }
  for (const name of st.rows.keys()) renderCalls(name);
}

// ---- rendering -------------------------------------------------------------

function renderAll() {
  const names = [...st.rows.keys()].sort();
  for (const [name, v] of st.views) {
    if (!st.rows.has(name)) { v.root.remove(); st.views.delete(name); }
  }
  let prev = null;
  for (const name of names) {
    let v = st.views.get(name);
    if (!v) v = makeView(name);
    const want = prev ? prev.nextSibling : el.fleets.firstChild;
    if (want !== v.root) el.fleets.insertBefore(v.root, want);
    prev = v.root;
    renderFleet(name);
  }
  el.empty.hidden = names.length > 0;
  renderHeader();
  renderOverview();
}

// ---- the summary line and the compact table ---------------------------------

// memberCounts counts a fleet's members by verdict (its members' list, else
// the row's summary).
function memberCounts(row) {
  const c = { total: 0, WORKING: 0, STALLED: 0, BLOCKED: 0 };
  if (Array.isArray(row.members) && row.members.length) {
    for (const m of row.members) { c.total++; if (c[m.verdict] != null) c[m.verdict]++; }
  } else if (row.summary) {
    for (const k of Object.keys(row.summary)) { c.total += row.summary[k]; if (c[k] != null) c[k] += row.summary[k]; }
  } else if (row.member_count != null) c.total = row.member_count;
  return c;
}

// fleetOrder is the compact table's order: failed fleets first, then those
// with a problem (not running, stalled or blocked members), then the rest,
// each by name.
function fleetOrder() {
  const rank = (row) => {
    if (row.state === 'failed' || row.crash_loop) return 0;
    const c = memberCounts(row);
    if (row.state !== 'running' || c.STALLED || c.BLOCKED) return 1;
    return 2;
  };
  return [...st.rows.values()].sort((a, b) => rank(a) - rank(b) || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

// renderOverview writes the summary line (failed fleets named first) and,
// in compact mode, the one-row-per-fleet table.
function renderOverview() {
  const rows = [...st.rows.values()];
  const failed = rows.filter((r) => r.state === 'failed' || r.crash_loop).map((r) => r.name).sort();
  const running = rows.filter((r) => r.state === 'running').length;
  const tot = { total: 0, WORKING: 0, STALLED: 0, BLOCKED: 0 };
  for (const r of rows) { const c = memberCounts(r); for (const k of Object.keys(tot)) tot[k] += c[k]; }
  const parts = [];
  if (failed.length) parts.push(`${failed.length} failed: ${failed.join(', ')}`);
  parts.push(`${rows.length} fleet${rows.length === 1 ? '' : 's'}, ${running} running`);
  parts.push(`${tot.total} member${tot.total === 1 ? '' : 's'}: ${tot.WORKING} working, ${tot.STALLED} stalled, ${tot.BLOCKED} blocked`);
  setText(el.summary, parts.join(' · '));
  setAttr(el.summary, 'data-failed', String(failed.length));
  setAttr(el.summary, 'data-working', String(tot.WORKING));
  setAttr(el.summary, 'data-stalled', String(tot.STALLED));
  setAttr(el.summary, 'data-blocked', String(tot.BLOCKED));
  el.summary.classList.toggle('bad', failed.length > 0);
  if (!compactMode()) return;
  const order = fleetOrder();
  let prev = null;
  const seen = new Set();
  for (const row of order) {
    seen.add(row.name);
    let tr = el.compactRows.querySelector(`tr[data-fleet="${CSS.escape(row.name)}"]`);
    if (!tr) {
      tr = document.createElement('tr');
      setAttr(tr, 'data-fleet', row.name);
      const th = document.createElement('th');
      th.scope = 'row';
      tr.appendChild(th);
      for (let i = 0; i < 11; i++) tr.appendChild(document.createElement('td'));
      tr.children[10].className = 'c-sampled';
    }
    const want = prev ? prev.nextSibling : el.compactRows.firstChild;
    if (want !== tr) el.compactRows.insertBefore(tr, want);
    prev = tr;
    const c = memberCounts(row);
    const cells = tr.children;
    setAttr(tr, 'data-state', row.state);
    setText(cells[0], row.name + (row.host && st.report && row.host !== st.report.host && row.host !== 'local' ? ` (on ${row.host})` : ''));
    setText(cells[1], row.state);
    cells[1].className = 'st-' + pick(STATES, row.state, 'unknown');
    setText(cells[2], String(c.total));
    setText(cells[3], String(c.WORKING));
    setText(cells[4], String(c.STALLED));
    cells[4].className = c.STALLED ? 'warn' : '';
    setText(cells[5], String(c.BLOCKED));
    cells[5].className = c.BLOCKED ? 'warn' : '';
    setText(cells[6], row.state === 'running' && row.uptime_s != null ? fmtDur(row.uptime_s) : '-');
    setText(cells[7], String(row.restarts || 0));
    setText(cells[8], cpuText(row.resources));
    setText(cells[9], memText(row.resources));
    compactAge(tr, row.name);
    setText(cells[11], row.crash_loop ? crashLoopText(row) : (row.state !== 'running' && row.last_error) ? row.last_error : (row.error || ''));
  }
  for (const tr of [...el.compactRows.children]) {
    if (!seen.has(tr.getAttribute('data-fleet'))) tr.remove();
  }
}

function compactMode() { return document.documentElement.getAttribute('data-view') === 'compact'; }

function setView(compact) {
  document.documentElement.setAttribute('data-view', compact ? 'compact' : 'cards');
  el.compact.hidden = !compact;
  el.fleets.hidden = compact;
  setAttr(el.viewToggle, 'aria-pressed', compact ? 'true' : 'false');
  setText(el.viewToggle, compact ? 'Fleet cards' : 'Compact table');
  const u = new URL(location.href);
  if (compact) u.searchParams.set('view', 'compact');
  else u.searchParams.delete('view');
  history.replaceState(null, '', u);
  renderOverview();
}
el.viewToggle.addEventListener('click', () => setView(!compactMode()));

// ---- browser notifications -------------------------------------------------------

// The [[notify]] rules' notifications also reach the page ("notify"
// events); it raises a browser notification for each only when the
// operator allowed them, which the browser asks only from the button's
// click (a user gesture), never on its own.
function notifyButton() {
  el.notifyAllow.hidden = !('Notification' in window) || Notification.permission !== 'default';
}
el.notifyAllow.addEventListener('click', () => {
  if (!('Notification' in window)) return;
  Promise.resolve(Notification.requestPermission()).then(notifyButton, notifyButton);
});
notifyButton();
if (navigator.permissions && navigator.permissions.query) {
  navigator.permissions.query({ name: 'notifications' }).then((s) => { s.onchange = notifyButton; }, () => {});
}

// onNotify raises one notification; a tag per subject, so "resolved"
// replaces its "firing" (and several tabs raise one). Events older than a
// minute (a stream resumed from the ring) are not raised.
function onNotify(n) {
  if (!('Notification' in window) || Notification.permission !== 'granted') return;
  if (Date.now() - Date.parse(n.at) > 60000) return;
  const who = n.member ? `${n.member} of ${n.fleet}` : n.host ? `${n.fleet}@${n.host}` : n.fleet;
  try {
    new Notification(`fleetmgr: ${n.kind} ${n.state}`, { body: n.text || who, tag: [n.kind, n.fleet, n.member || '', n.host || ''].join('|') });
  } catch (e) {
    // A browser that allows notifications only from a service worker: none.
  }
}

function makeView(name) {
  const root = el.tFleet.content.firstElementChild.cloneNode(true);
  setAttr(root, 'data-fleet', name);
  const v = {
    root,
    name: one(root, '.fleet-name'), host: one(root, '.host-badge'), state: one(root, '.state-badge'),
    summary: one(root, '.fleet-summary'), alerts: one(root, '.alerts'), action: one(root, '.action-result'),
    uptime: one(root, '.f-uptime'), restarts: one(root, '.f-restarts'), health: one(root, '.f-health'),
    herdr: one(root, '.f-herdr'), broker: one(root, '.f-broker'), pid: one(root, '.f-pid'), sampled: one(root, '.f-sampled'),
    res: one(root, '.f-res'), sparkRes: one(root, '.spark-res-svg'), sparkCPU: one(root, '.spark-cpu'), sparkRSS: one(root, '.spark-rss'), capRes: one(root, '.cap-res'),
    spark: one(root, '.spark'), sparkCalls: one(root, '.spark-calls'), sparkP50: one(root, '.spark-p50'), capCalls: one(root, '.cap-calls'),
    axis: one(root, '.axis'), axisMarks: one(root, '.axis-marks'), capRestarts: one(root, '.cap-restarts'),
    drift: one(root, '.drift'), driftList: one(root, '.drift-list'),
    excluded: one(root, '.excluded'), excludedList: one(root, '.excluded-list'),
    tbody: one(root, '.members tbody'), table: one(root, '.members'), note: one(root, '.members-note'),
    log: one(root, '.log-lines'), logSummary: one(root, '.log summary'),
    buttons: [...root.querySelectorAll('button[data-verb]')],
    members: new Map(),
    listKeys: { alerts: '', drift: '', excluded: '' },
  };
  setText(v.name, name);
  for (const b of v.buttons) {
    const verb = b.getAttribute('data-verb');
    setAttr(b, 'aria-label', `${verb[0].toUpperCase()}${verb.slice(1)} fleet ${name}`);
    b.addEventListener('click', () => openConfirm(name, verb));
  }
  setAttr(v.log, 'aria-label', `last lines of fleet ${name}'s fleetd log`);
  st.views.set(name, v);
  return v;
}

// fillList replaces a list's items only when its content changed.
function fillList(v, key, list, items, cls) {
  const k = JSON.stringify(items);
  if (v.listKeys[key] === k) return;
  v.listKeys[key] = k;
  clear(list);
  for (const it of items) {
    const li = document.createElement('li');
    li.textContent = it.text;
    if (it.bad) li.className = 'bad';
    else if (it.cls) li.className = it.cls;
    else if (cls) li.className = cls;
    list.appendChild(li);
  }
}

function renderFleet(name) {
  const row = st.rows.get(name);
  const v = st.views.get(name) || (row && makeView(name));
  if (!row || !v) return;
  renderOverview();
  if (!v.root.isConnected) { renderAll(); return; }
  const meta = st.meta.get(name) || { restarts: [] };
  setAttr(v.root, 'data-state', row.state);
  v.root.classList.toggle('remote', isRemote(row));
  const local = !row.host || row.host === 'local' || (st.report && row.host === st.report.host);
  setAttr(v.root, 'data-host', local ? 'local' : row.host);
  v.host.hidden = local;
  setText(v.host, local ? '' : `on ${row.host}` + (row.remote ? ` (${row.remote.host_state})` : ''));
  setText(v.state, row.state);
  v.state.className = 'badge state-badge st-' + pick(STATES, row.state, 'unknown');

  // Summary: the fleet's own verdict, else the members per verdict.
  let summary = '';
  if (row.verdict) summary = row.verdict;
  else if (row.summary) {
    summary = VERDICTS.filter((k) => row.summary[k]).map((k) => `${row.summary[k]} ${k}`).join(', ');
  }
  setText(v.summary, summary);

  // Alerts: what needs the operator's eye, in words.
  const alerts = [];
  // A start that did not become healthy: what happens next, in the one
  // sentence serve gives (issue 24 item 5), its "next in" kept current
  // by renderTimes; it stands for the crash loop, pending restart and
  // error lines below.
  const next = row.what_next || '';
  if (next) alerts.push({ bad: row.state === 'failed', text: next });
  if (row.crash_loop && !next) alerts.push({ bad: true, text: crashLoopText(row) });
  if (row.next_restart_at && !next) {
    alerts.push({ text: 'restart pending' + (row.last_restart_reason ? ` (reason: ${row.last_restart_reason})` : ''), countdown: true });
  }
  const rf = row.remote;
  if (rf && rf.host_state !== 'online') {
    // Kept as last reported, never dropped; the last beat ages in renderTimes.
    alerts.push({ bad: true, text: `host ${row.host} ${rf.host_state}: kept as last reported (${rf.reported_state || 'nothing'})`, seen: true });
  } else if (row.error) alerts.push({ bad: row.verdict === 'UNKNOWN', text: row.error });
  if (row.last_error && row.state !== 'running' && !row.crash_loop && !next) alerts.push({ bad: row.state === 'failed', text: 'last error: ' + row.last_error });
  // The members the last fleetd restart ended (fleetd reaps the panes a
  // previous fleetd left; issue 24 item 3), as status and list say it.
  const lost = lostSentence(row.last_restart_lost);
  if (lost) alerts.push({ cls: 'lost', text: lost + (row.members_lost > row.last_restart_lost.length ? ` (${row.members_lost} members lost in all)` : '') });
  if (rf) alerts.push({ text: '', seen: true });
  fillList(v, 'alerts', v.alerts, alerts.map((a) => ({ bad: a.bad, cls: a.cls, text: a.text })));
  v.countdown = row.next_restart_at && !next ? v.alerts.querySelector('li:not(.bad):not(.lost)') : null;
  v.next = next ? v.alerts.firstElementChild : null;
  v.seen = rf ? v.alerts.lastElementChild : null; // "host beta: last seen 2s ago", kept current by renderTimes

  // Facts.
  setText(v.restarts, row.restarts + (row.last_restart_reason ? ` — last: ${row.last_restart_reason}` : '') + (row.last_exit && !(row.last_restart_reason || '').includes(row.last_exit) ? `; last exit: ${row.last_exit}` : ''));
  if (row.health) setText(v.health, row.health.ok ? `ok, ${row.health.latency_ms.toFixed(1)} ms` : `down: ${row.health.error || 'no answer'}`);
  else setText(v.health, '-');
  if (row.herdr) setText(v.herdr, `${row.herdr.alive ? 'alive' : 'dead'} (${row.herdr.session})` + (row.herdr.error ? `: ${row.herdr.error}` : ''));
  else setText(v.herdr, '-');
  setText(v.broker, brokerText(row.broker));
  setText(v.res, resText(row.resources));
  if (rf) setText(v.pid, `on ${row.host}`);
  else setText(v.pid, [row.pid ? `pid ${row.pid}` : 'not running', row.port ? `port ${row.port}` : ''].filter(Boolean).join(', '));

  // Lists.
  v.drift.hidden = !(row.schema_drift && row.schema_drift.length);
  fillList(v, 'drift', v.driftList, (row.schema_drift || []).map((t) => ({ text: t })));
  const ex = Array.isArray(row.excluded_tools) ? row.excluded_tools : [];
  v.excluded.hidden = ex.length === 0;
  fillList(v, 'excluded', v.excludedList, ex.map((t) => ({ text: excludedText(t) })));

  // Actions: none on a fleet of another host; one at a time per fleet.
  for (const b of v.buttons) b.disabled = isRemote(row) || st.busy.has(name);

  renderMembers(name, row, v);
  renderCalls(name);
  renderResources(name, v);
  renderRestarts(name, meta, v);
  renderTimes(name);
}

// lostSentence says that a restart ended the members named, in
// lifecycle.LostSentence's words: "restart ended 2 members (a, b)"; ''
// for none.
function lostSentence(names) {
  if (!Array.isArray(names) || names.length === 0) return '';
  if (names.length === 1) return `restart ended 1 member (${names[0]})`;
  return `restart ended ${names.length} members (${names.join(', ')})`;
}

function excludedText(t) {
  if (typeof t === 'string') return t;
  if (t && typeof t === 'object') {
    const n = t.name || t.tool || '?';
    return t.reason ? `${n}: ${t.reason}` : String(n);
  }
  return String(t);
}

function brokerText(b) {
  if (!b) return '-';
  if (!b.configured) return b.note || 'no broker configured';
  if (!b.reachable) return `unreachable (${b.vhost || '?'})` + (b.note ? `: ${b.note}` : '');
  const q = Object.entries(b.inboxes || {});
  const total = q.reduce((a, [, n]) => a + n, 0);
  const top = q.sort((a, b) => b[1] - a[1]).slice(0, 4).map(([k, n]) => `${k} ${n}`).join(', ');
  return `reachable (${b.vhost}), ${total} queued` + (top ? `: ${top}` : '');
}

function renderMembers(name, row, v) {
  const members = row.members || [];
  let note = '';
  const rf = row.remote;
  if (rf) {
    note = row.member_count >= 0
      ? `${row.member_count} members on ${row.host}, as it last judged them` + (rf.verdicts_age_s != null ? ` (${fmtDur(rf.verdicts_age_s)} before its last beat)` : '')
      : `members on ${row.host}: not reported`;
  } else if (row.state === 'running' && row.member_count === -1 && !row.error) note = 'members: sampling…';
  else if (row.state === 'stopped') note = 'stopped: no members';
  else if (row.member_count === -1 && row.state !== 'running') note = `${row.state}: members unknown until it runs`;
  else if (row.member_count === 0) note = 'no members';
  setText(v.note, note);
  v.table.hidden = members.length === 0;
  const seen = new Set();
  let prev = null;
  for (const m of members) {
    if (seen.has(m.id)) continue;
    seen.add(m.id);
    let mv = v.members.get(m.id);
    if (!mv) {
      const tr = el.tMember.content.firstElementChild.cloneNode(true);
      setAttr(tr, 'data-member', m.id);
      mv = { tr, id: one(tr, '.m-id'), badge: one(tr, '.m-verdict .badge'), detail: one(tr, '.m-detail'), age: one(tr, '.m-age'), cpu: one(tr, '.m-cpu'), mem: one(tr, '.m-mem'), svg: one(tr, '.timeline'), tlKey: '' };
      setText(mv.id, m.id);
      v.members.set(m.id, mv);
    }
    const want = prev ? prev.nextSibling : v.tbody.firstChild;
    if (want !== mv.tr) v.tbody.insertBefore(mv.tr, want);
    prev = mv.tr;
    mv.m = m;
    setAttr(mv.tr, 'data-verdict', m.verdict);
    setText(mv.cpu, cpuText(m.resources));
    setText(mv.mem, memText(m.resources));
    setAttr(mv.mem, 'title', m.resources ? `${m.resources.procs} procs, ${m.resources.fds} fds` : '');
    mv.badge.className = 'badge v-' + pick(VERDICTS, m.verdict, 'UNKNOWN');
    const parts = [];
    if (m.verdict === 'WORKING') parts.push(`changed: ${(m.evidence || []).join(', ')}`);
    if (m.reason && m.verdict !== 'WORKING') parts.push(m.reason);
    const small = [m.pane_id && `pane ${m.pane_id}`, m.live_status && `claims ${m.live_status}`, m.agent_status && `herdr ${m.agent_status}`].filter(Boolean).join(' · ');
    const key = parts.join(' ') + '\u0000' + small;
    if (mv.detailKey !== key) {
      mv.detailKey = key;
      clear(mv.detail);
      mv.detail.appendChild(document.createTextNode(parts.join(' ')));
      if (small) {
        const s = document.createElement('small');
        s.textContent = small;
        mv.detail.appendChild(s);
      }
    }
    renderTimeline(name, m.id, mv);
  }
  for (const [id, mv] of v.members) {
    if (!seen.has(id)) { mv.tr.remove(); v.members.delete(id); }
  }
}

// verdictText is the badge: the verdict word, and for STALLED how long
// (the evidence and reasons are in the next column).
function verdictText(m, extra) {
  if (m.verdict === 'STALLED' && m.last_change_age_s != null) return `STALLED ${fmtDur(m.last_change_age_s + extra)}`;
  return m.verdict;
}

function renderTimeline(name, id, mv) {
  const tl = st.timelines.get(name);
  const s = (tl && tl.members.get(id)) || '';
  const key = s + '|' + st.limits.timeline;
  if (mv.tlKey === key) return;
  mv.tlKey = key;
  const n = st.limits.timeline;
  setAttr(mv.svg, 'viewBox', `0 0 ${n * 4} 8`);
  clear(mv.svg);
  const counts = {};
  const off = n - s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (!LETTER[c]) continue;
    counts[LETTER[c]] = (counts[LETTER[c]] || 0) + 1;
    const r = svgEl('rect');
    r.setAttribute('x', String((off + i) * 4));
    r.setAttribute('y', '0');
    r.setAttribute('width', '3.4');
    r.setAttribute('height', '8');
    r.setAttribute('class', c);
    mv.svg.appendChild(r);
  }
  const words = VERDICTS.filter((k) => counts[k]).map((k) => `${counts[k]} ${k}`).join(', ');
  setAttr(mv.svg, 'aria-label', s.length ? `last ${s.length} samples, oldest first: ${words}` : 'no samples yet');
}

function renderCalls(name) {
  const v = st.views.get(name);
  if (!v) return;
  const c = st.calls, s = c.fleets.get(name);
  const n = st.limits.timeline;
  if (!s || !s.calls.length) {
    setAttr(v.sparkCalls, 'points', '');
    setAttr(v.sparkP50, 'points', '');
    setText(v.capCalls, 'tool calls: no data yet');
    setAttr(v.spark, 'aria-label', 'tool calls: no data yet');
    return;
  }
  const maxC = Math.max(1, ...s.calls);
  const p50s = s.p50_ms.filter((x) => x != null);
  const maxP = Math.max(1e-3, ...p50s);
  const x = (i) => ((n - s.calls.length + i) * 180) / Math.max(1, n - 1);
  setAttr(v.sparkCalls, 'points', s.calls.map((k, i) => `${x(i).toFixed(1)},${(33 - (k / maxC) * 30).toFixed(1)}`).join(' '));
  setAttr(v.sparkP50, 'points', s.p50_ms.map((p, i) => (p == null ? null : `${x(i).toFixed(1)},${(33 - (p / maxP) * 30).toFixed(1)}`)).filter(Boolean).join(' '));
  const per = fmtDur(c.period_ms / 1000);
  const last = s.calls[s.calls.length - 1], total = s.calls.reduce((a, b) => a + b, 0), errs = s.errors.reduce((a, b) => a + b, 0);
  const lastP = p50s.length ? p50s[p50s.length - 1] : null;
  const text = `tool calls per ${per} (solid): last ${last}, max ${maxC === 1 && !total ? 0 : maxC}, ${total} in view` +
    (errs ? `, ${errs} not ok` : '') + `; p50 latency (dashed): ${lastP == null ? 'no calls' : lastP.toFixed(1) + ' ms'}`;
  setText(v.capCalls, text);
  setAttr(v.spark, 'aria-label', text);
}

// renderResources draws the fleet's CPU % (solid) and resident memory
// (dashed) at each of the samplings the timeline keeps (hub.sampleLocked).
function renderResources(name, v) {
  const tl = st.timelines.get(name) || { cpu: [], rss: [] };
  const cpu = tl.cpu || [], rss = tl.rss || [];
  const n = st.limits.timeline;
  const x = (i) => ((n - cpu.length + i) * 180) / Math.max(1, n - 1);
  const vals = cpu.filter((c) => c != null);
  const maxC = Math.max(1, ...vals), maxR = Math.max(1, ...rss);
  setAttr(v.sparkCPU, 'points', cpu.map((c, i) => (c == null ? null : `${x(i).toFixed(1)},${(33 - (c / maxC) * 30).toFixed(1)}`)).filter(Boolean).join(' '));
  setAttr(v.sparkRSS, 'points', rss.map((b, i) => `${x(i).toFixed(1)},${(33 - (b / maxR) * 30).toFixed(1)}`).join(' '));
  const text = !vals.length ? 'CPU and memory: no measurement yet'
    : `CPU % per sampling (solid): last ${cpuText({ cpu_percent: vals[vals.length - 1] })}, max ${cpuText({ cpu_percent: Math.max(...vals) })}; ` +
      `RSS (dashed): last ${memText({ rss_bytes: rss[rss.length - 1] })}, max ${memText({ rss_bytes: Math.max(...rss) })}; ${cpu.length} samplings`;
  setText(v.capRes, text);
  setAttr(v.sparkRes, 'aria-label', text);
}

function renderRestarts(name, meta, v) {
  const now = Date.now(), from = now - AXIS_SPAN_MS;
  const marks = (meta.restarts || []).filter((m) => Date.parse(m.at) >= from);
  const key = marks.map((m) => m.at).join() + '|' + Math.floor(now / 15000);
  if (v.axisKey === key) return;
  v.axisKey = key;
  clear(v.axisMarks);
  for (const m of marks) {
    const t = Date.parse(m.at);
    const r = svgEl('rect');
    r.setAttribute('x', String(Math.max(0, ((t - from) / AXIS_SPAN_MS) * 180 - 1)));
    r.setAttribute('y', '6');
    r.setAttribute('width', '2');
    r.setAttribute('height', '24');
    const title = svgEl('title');
    title.textContent = `${clock(t)}` + (m.reason ? ` — ${m.reason}` : '');
    r.appendChild(title);
    v.axisMarks.appendChild(r);
  }
  let text = `restarts in the last hour: ${marks.length}`;
  if (marks.length) {
    const lm = marks[marks.length - 1];
    text += `, last at ${clock(Date.parse(lm.at))}` + (lm.reason ? ` (${lm.reason})` : '');
  }
  setText(v.capRestarts, text);
  setAttr(v.axis, 'aria-label', text);
}

// renderTimes updates what grows with the clock: uptime, countdown, ages.
function renderTimes(name) {
  const row = st.rows.get(name), v = st.views.get(name), meta = st.meta.get(name);
  if (!row || !v) return;
  const extra = meta && meta.as_of ? Math.max(0, since(meta.as_of)) : 0;
  setText(v.uptime, row.state === 'running' && row.uptime_s != null ? fmtDur((row.uptime_s || 0) + extra) : '-');
  if (v.seen && row.remote) setText(v.seen, `host ${row.host}: ${seenText(row.remote.last_seen)}`);
  if (v.next && row.what_next) {
    let text = row.what_next;
    if (row.next_restart_at) {
      const left = -since(row.next_restart_at);
      text = text.replace(/next (in \d+ s|now)/, left > 0 ? `next in ${Math.ceil(left)} s` : 'next now');
    }
    setText(v.next, text);
  }
  if (v.countdown && row.next_restart_at) {
    const left = -since(row.next_restart_at);
    const reason = row.last_restart_reason ? ` (reason: ${row.last_restart_reason})` : '';
    setText(v.countdown, (left >= 0 ? `restarting in ${fmtDur(left)}` : `restart overdue by ${fmtDur(-left)}`) + reason);
  }
  // The sample's own age: what the members, health and broker say is as
  // of then. Older than two sampling intervals, it is greyed (data-stale)
  // and says so, never shown as fresh (issue 24 item 16).
  const { age, interval, stale } = sampleAge(name);
  setAttr(v.root, 'data-stale', String(stale));
  setAttr(v.root, 'data-sample-age', age == null ? '' : String(Math.floor(age)));
  setText(v.sampled, age == null ? 'not sampled yet'
    : `${fmtDur(age)} ago` + (stale ? ` (stale: older than two sampling intervals of ${fmtDur(interval / 1000)})` : ''));
  // "Last change" is when the member took its verdict (meta.verdict_since,
  // kept by serve across samplings), not the sample's age nor its last
  // file or output activity (the STALLED badge counts that).
  const vsince = (meta && meta.verdict_since) || {};
  for (const mv of v.members.values()) {
    const m = mv.m;
    setText(mv.badge, verdictText(m, extra));
    const vs = vsince[m.id];
    if (vs && vs.verdict === m.verdict) {
      const at = Date.parse(vs.at);
      setText(mv.age, `${vs.at_least ? '≥ ' : ''}${fmtDur(Math.max(0, (Date.now() - at) / 1000))} ago`);
      setAttr(mv.age, 'data-changed-at', vs.at);
      setAttr(mv.age, 'title', `${m.verdict} ${vs.at_least ? 'at least ' : ''}since ${clock(at)}`);
    } else {
      setText(mv.age, '-');
      setAttr(mv.age, 'data-changed-at', '');
      setAttr(mv.age, 'title', '');
    }
  }
}

function renderHeader() {
  const r = st.report;
  if (!r) return;
  // fleets.toml does not load: serve works on the configuration in force.
  el.configError.hidden = !r.config_error;
  setText(el.configError, r.config_error ? `fleets.toml does not load; serve keeps the configuration in force: ${r.config_error}` : '');
  const times = [...st.meta.values()].map((m) => m.sampled_at).filter(Boolean).map(Date.parse);
  if (!times.length) setText(el.sampled, 'members not sampled yet');
  else {
    const newest = Math.max(...times);
    setText(el.sampled, `members sampled ${fmtDur((Date.now() - newest) / 1000)} ago, ${fmtDur((r.interval_ms || 0) / 1000)} apart, via ${r.via} on ${r.host}`);
  }
  // The federation (when serve federates): this host, its broker
  // connection, and every peer with its state and last beat.
  const fed = r.federation;
  const hosts = fed && Array.isArray(fed.hosts) ? fed.hosts : [];
  el.hosts.hidden = !fed;
  const items = hosts.map((h) => ({
    host: String(h.host), state: pick(HOST_STATES, h.state, 'expired'),
    text: `${h.host}: ${h.state}, ${h.fleets} fleet${h.fleets === 1 ? '' : 's'}, ${seenText(h.last_seen)}` + (h.clock ? `; ${h.clock}` : ''),
  }));
  if (fed) {
    items.unshift({ self: true, text: `this host: ${fed.host}, ` + (fed.connected ? 'connected to the broker' : `not connected${fed.error ? ` (${fed.error})` : ''}`) });
  }
  const key = JSON.stringify(items);
  if (el.hostList.dataset.key !== key) {
    el.hostList.dataset.key = key;
    clear(el.hostList);
    for (const it of items) {
      const li = document.createElement('li');
      li.textContent = it.text;
      if (!it.self) {
        li.setAttribute('data-host', it.host);
        li.setAttribute('data-host-state', it.state);
        li.className = 'host-' + it.state;
      }
      el.hostList.appendChild(li);
    }
  }
}

function tick() {
  if (document.hidden) return;
  if (compactMode()) for (const tr of el.compactRows.children) compactAge(tr, tr.getAttribute('data-fleet'));
  for (const name of st.rows.keys()) {
    renderTimes(name);
    const v = st.views.get(name);
    if (v) renderRestarts(name, st.meta.get(name) || { restarts: [] }, v);
  }
  renderHeader();
}

// ---- logs --------------------------------------------------------------------

let logSource = null;
function openLogs() {
  const names = [...st.rows.keys()].filter((n) => !isRemote(st.rows.get(n))).sort();
  const key = names.join('\u0000');
  if (shared) {
    if (key !== st.logNames) shared.postMessage({ kind: 'logs', names });
    st.logNames = key;
    return;
  }
  if (key === st.logNames && logSource) return;
  st.logNames = key;
  if (logSource) logSource.close();
  logSource = null;
  if (!names.length) return;
  const q = names.map((n) => 'fleet=' + encodeURIComponent(n)).join('&');
  logSource = new EventSource('/api/logs?' + q);
  logSource.addEventListener('tail', (e) => { const d = JSON.parse(e.data); st.logs.set(d.fleet, []); addLines(d.fleet, d.lines || [], 0); });
  logSource.addEventListener('lines', (e) => { const d = JSON.parse(e.data); addLines(d.fleet, d.lines || [], d.skipped || 0); });
}

function addLines(name, lines, skipped) {
  let buf = st.logs.get(name) || [];
  if (skipped) buf.push(`[… ${skipped} lines skipped]`);
  buf = buf.concat(lines);
  if (buf.length > st.limits.log_lines) buf = buf.slice(buf.length - st.limits.log_lines);
  st.logs.set(name, buf);
  const v = st.views.get(name);
  if (!v) return;
  const stick = v.log.scrollTop + v.log.clientHeight >= v.log.scrollHeight - 4;
  setText(v.log, buf.join('\n'));
  if (stick) v.log.scrollTop = v.log.scrollHeight;
}

// ---- actions -----------------------------------------------------------------

let pending = null;
function openConfirm(name, verb) {
  pending = { name, verb };
  const V = verb[0].toUpperCase() + verb.slice(1);
  setText(el.dTitle, `${V} fleet ${name}?`);
  // A stop or restart ends the fleet's live members (a new fleetd reaps
  // them): the dialog says how many and which, as the CLI asks.
  let text = VERB_TEXT[verb];
  const row = st.rows.get(name);
  const ids = ((row && row.members) || []).map(m => m.id);
  if (verb !== 'start' && ids.length) {
    text += ` It ends ${ids.length} live member${ids.length === 1 ? '' : 's'}: ${ids.join(', ')}.`;
  }
  setText(el.dText, text);
  el.dLeadRow.hidden = verb === 'stop';
  el.dLead.checked = false;
  setText(el.dOK, `${V} ${name}`);
  el.dOK.className = verb === 'start' ? '' : 'danger';
  el.dialog.showModal();
  el.dCancel.focus();
}
el.dCancel.addEventListener('click', () => { pending = null; el.dialog.close(); });
el.dialog.addEventListener('cancel', () => { pending = null; });
el.dOK.addEventListener('click', () => {
  const p = pending;
  pending = null;
  el.dialog.close();
  if (p) act(p.name, p.verb, p.verb !== 'stop' && el.dLead.checked);
});

function say(name, text) {
  setText(el.result, text);
  const v = st.views.get(name);
  if (v) setText(v.action, text);
}

async function act(name, verb, lead) {
  st.busy.add(name);
  renderFleet(name);
  say(name, `${verb} ${name}${lead ? ' with its lead' : ''}: working…`);
  try {
    const res = await fetch('/api/action', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Fleetmgr-Csrf': csrf },
      body: JSON.stringify({ verb, fleet: name, lead }),
      cache: 'no-store',
    });
    let r = {};
    try { r = await res.json(); } catch (e) { r = { error: `HTTP ${res.status}` }; }
    if (r.ok) {
      const steps = (r.steps || []).length;
      say(name, `${verb} ${name}: done in ${fmtDur(r.took_ms / 1000)}, now ${r.state || '?'}` + (r.pid ? ` (pid ${r.pid})` : '') + (steps ? `, ${steps} steps` : ''));
    } else if (r.refused) {
      say(name, `${verb} ${name} refused: ${r.error}`);
    } else {
      say(name, `${verb} ${name} failed` + (r.state ? ` (now ${r.state})` : '') + `: ${r.error || 'HTTP ' + res.status}`);
    }
  } catch (e) {
    say(name, `${verb} ${name}: no answer from fleetmgr serve (${e.message}); the fleet list updates when it is back`);
  } finally {
    st.busy.delete(name);
    renderFleet(name);
  }
}

// ---- the event stream --------------------------------------------------------

function setLive(live, text) {
  document.documentElement.setAttribute('data-live', live ? 'true' : 'false');
  setText(el.conn, text);
}

function connect(since) {
  const es = new EventSource('/events?since=' + encodeURIComponent(since));
  es.addEventListener('open', () => setLive(true, 'live'));
  es.addEventListener('error', () => {
    if (es.readyState === EventSource.CLOSED) setLive(false, 'disconnected: reload the page');
    else setLive(false, 'reconnecting…');
  });
  const on = (name, fn) => es.addEventListener(name, (e) => { fn(JSON.parse(e.data)); });
  on('snapshot', applySnapshot);
  on('fleet', onFleet);
  on('report', onReport);
  on('calls', onCalls);
  on('federation', onFederation);
  on('notify', onNotify);
}

// ---- the shared worker ---------------------------------------------------------

// shared is the port to the browser's one dashboard worker (worker.js),
// which holds the streams for every tab; null where SharedWorker is missing.
let shared = null;
let resyncing = false;

function startShared() {
  if (typeof SharedWorker !== 'function') return null;
  const url = document.querySelector('meta[name="fleetmgr-worker"]').getAttribute('content');
  let src = url;
  if (window.trustedTypes) {
    // The page's CSP allows this one policy, which makes only the
    // worker's own URL.
    const pol = trustedTypes.createPolicy('fleetmgr-worker', {
      createScriptURL: (u) => { if (u !== url) throw new TypeError('not the dashboard worker'); return u; },
    });
    src = pol.createScriptURL(url);
  }
  try {
    const w = new SharedWorker(src, { name: 'fleetmgr-dashboard' });
    w.port.addEventListener('message', (e) => onShared(e.data));
    w.port.start();
    window.addEventListener('pagehide', () => w.port.postMessage({ kind: 'bye' }));
    return w.port;
  } catch (e) {
    return null;
  }
}

function idOf(id) {
  const i = (id || '').indexOf('.');
  return i < 0 ? null : { epoch: id.slice(0, i), seq: Number(id.slice(i + 1)) };
}

const HANDLERS = { snapshot: applySnapshot, fleet: onFleet, report: onReport, calls: onCalls, federation: onFederation, notify: onNotify };

function onShared(m) {
  switch (m.kind) {
    case 'live': setLive(m.live, m.text); break;
    case 'tail': st.logs.set(m.fleet, []); addLines(m.fleet, m.lines || [], 0); break;
    case 'lines': addLines(m.fleet, m.lines || [], m.skipped || 0); break;
    case 'event': {
      if (resyncing || !HANDLERS[m.name]) return;
      const at = idOf(m.id);
      if (m.name !== 'snapshot' && at) {
        if (at.epoch === st.epoch && at.seq <= st.seq) return; // the snapshot holds it
        if (at.epoch !== st.epoch || at.seq !== st.seq + 1) { resync(); return; } // a gap: start again
      }
      HANDLERS[m.name](JSON.parse(m.data));
      if (at) { st.epoch = at.epoch; st.seq = at.seq; }
      break;
    }
  }
}

// readSnapshot reads /api/snapshot and applies it; false when it cannot.
async function readSnapshot() {
  let snap;
  try {
    const res = await fetch('/api/snapshot', { cache: 'no-store' });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    snap = await res.json();
  } catch (e) {
    setLive(false, `cannot read /api/snapshot (${e.message}): reload the page`);
    return null;
  }
  applySnapshot(snap);
  const at = idOf(snap.event_id);
  if (at) { st.epoch = at.epoch; st.seq = at.seq; }
  return snap;
}

async function resync() {
  resyncing = true;
  const snap = await readSnapshot();
  resyncing = false;
  if (snap && shared) shared.postMessage({ kind: 'hello', since: snap.event_id });
}

async function boot() {
  setView(new URL(location.href).searchParams.get('view') === 'compact');
  shared = startShared();
  const snap = await readSnapshot();
  if (!snap) return;
  document.documentElement.setAttribute('data-rendered', String(Math.round(performance.now())));
  document.documentElement.setAttribute('data-transport', shared ? 'shared-worker' : 'event-source');
  if (shared) shared.postMessage({ kind: 'hello', since: snap.event_id });
  else connect(snap.event_id);
  setInterval(tick, 1000);
}

boot();
