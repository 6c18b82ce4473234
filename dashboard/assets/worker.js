// fleetmgr dashboard: the shared worker. One per browser profile and page
// version, shared by every open tab of the dashboard, it holds the page's
// two streams (/events and /api/logs) for all of them, so eight tabs cost
// two connections, not sixteen (a browser allows six per host over
// HTTP/1.1). Each tab reads its own snapshot, says hello with the snapshot's
// event id, and gets from here the events after it (replayed from a ring of
// recent ones, then live), the log tails, and whether the stream is live.
// Tabs apply events in order by id and read a fresh snapshot on any gap.
'use strict';

const RING = 1000; // recent events kept for tabs that say hello late
const LOG_LINES = 200; // per fleet, for the tail a new tab gets

const ports = new Map(); // port → {names: [...]} (the fleets whose logs it shows)
const ring = []; // {id, name, data}, oldest first
let events = null; // the /events EventSource
let logs = null; // the /api/logs EventSource
let logKey = null;
const tails = new Map(); // fleet → lines
let live = { live: false, text: 'connecting…' };

function send(port, m) {
  try { port.postMessage(m); } catch (e) { ports.delete(port); }
}
function broadcast(m) {
  for (const p of ports.keys()) send(p, m);
}
function setLive(l, text) {
  live = { live: l, text };
  broadcast(Object.assign({ kind: 'live' }, live));
}

function seqOf(id) {
  const i = id.indexOf('.');
  return i < 0 ? null : { epoch: id.slice(0, i), seq: Number(id.slice(i + 1)) };
}

function openEvents(since) {
  events = new EventSource('/events?since=' + encodeURIComponent(since || ''));
  events.addEventListener('open', () => setLive(true, 'live'));
  events.addEventListener('error', () => {
    if (events.readyState === EventSource.CLOSED) setLive(false, 'disconnected: reload the page');
    else setLive(false, 'reconnecting…');
  });
  for (const name of ['snapshot', 'fleet', 'report', 'calls', 'federation', 'notify']) {
    events.addEventListener(name, (e) => {
      const m = { kind: 'event', name, id: e.lastEventId, data: e.data };
      if (name === 'snapshot') ring.length = 0;
      ring.push(m);
      if (ring.length > RING) ring.shift();
      broadcast(m);
    });
  }
}

function wantedLogs() {
  const all = new Set();
  for (const p of ports.values()) for (const n of p.names) all.add(n);
  return [...all].sort();
}

function openLogs() {
  const names = wantedLogs();
  const key = names.join('\u0000');
  if (key === logKey) return;
  logKey = key;
  if (logs) logs.close();
  logs = null;
  if (!names.length) return;
  logs = new EventSource('/api/logs?' + names.map((n) => 'fleet=' + encodeURIComponent(n)).join('&'));
  logs.addEventListener('tail', (e) => {
    const d = JSON.parse(e.data);
    const lines = (d.lines || []).slice(-LOG_LINES);
    tails.set(d.fleet, lines);
    broadcast({ kind: 'tail', fleet: d.fleet, lines });
  });
  logs.addEventListener('lines', (e) => {
    const d = JSON.parse(e.data);
    let buf = tails.get(d.fleet) || [];
    if (d.skipped) buf.push(`[… ${d.skipped} lines skipped]`);
    buf = buf.concat(d.lines || []);
    if (buf.length > LOG_LINES) buf = buf.slice(buf.length - LOG_LINES);
    tails.set(d.fleet, buf);
    broadcast({ kind: 'lines', fleet: d.fleet, lines: d.lines || [], skipped: d.skipped || 0 });
  });
}

function hello(port, since) {
  send(port, Object.assign({ kind: 'live' }, live));
  if (!events) {
    openEvents(since);
    return;
  }
  const at = seqOf(since || '');
  for (const m of ring) { // what the tab's snapshot does not hold yet
    const s = seqOf(m.id);
    if (at && s && s.epoch === at.epoch && s.seq > at.seq) send(port, m);
  }
}

self.addEventListener('connect', (ce) => {
  const port = ce.ports[0];
  ports.set(port, { names: [] });
  port.addEventListener('message', (e) => {
    const m = e.data || {};
    switch (m.kind) {
      case 'hello':
        hello(port, m.since);
        break;
      case 'logs': {
        const p = ports.get(port);
        if (!p) break;
        p.names = (m.names || []).map(String);
        for (const n of p.names) {
          if (tails.has(n)) send(port, { kind: 'tail', fleet: n, lines: tails.get(n) });
        }
        openLogs();
        break;
      }
      case 'bye':
        ports.delete(port);
        openLogs();
        break;
    }
  });
  port.start();
});
