// Tessera dashboard: logs in, then polls /api/state every 2 s and
// /api/history every 5 s and redraws in place. Every value from the
// server is written with textContent (never parsed as HTML).
"use strict";

const STATE_EVERY_MS = 2000;
const HISTORY_EVERY_MS = 5000;
const FETCH_TIMEOUT_MS = 8000;
const HOUR_MS = 3600 * 1000;

let history = [];
let lastSeq = 0; // the newest history point held (the MDS numbers them)
let generation = 0; // polling loops of an older login stop
let lastOk = 0;
let skewMs = 0; // the MDS's clock minus this browser's: charts use the MDS's time

const serverNow = () => Date.now() + skewMs;

const $ = (id) => document.getElementById(id);

function human(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  let v = Number(n) || 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 1 : 0)) + " " + units[i];
}

function count(n) {
  const v = Number(n) || 0;
  if (v >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e4) return (v / 1e3).toFixed(0) + "k";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return String(Math.round(v));
}

function duration(s) {
  if (s === null || s === undefined) return "unknown";
  if (s < 90) return s + " s";
  if (s < 5400) return Math.round(s / 60) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " days";
}

// The session id lives in this tab's sessionStorage (scoped to this exact
// origin, port included) and travels in a header: no cookie, so no other
// page or local service is ever sent it.
const SESSION_KEY = "tessera-session";
const session = () => sessionStorage.getItem(SESSION_KEY);

async function call(path, opts) {
  const ctl = new AbortController();
  const t = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
  const headers = Object.assign({}, (opts && opts.headers) || {});
  if (session()) headers["Authorization"] = "Bearer " + session();
  try {
    return await fetch(path, Object.assign({}, opts || {}, { credentials: "omit", signal: ctl.signal, headers }));
  } finally {
    clearTimeout(t);
  }
}

// ---- login ---------------------------------------------------------------

function hex(bytes) {
  return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
}

function unhex(s) {
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.substr(2 * i, 2), 16);
  return out;
}

// A key file (TOML) becomes a 12-hour token signed in the browser.
async function tokenFrom(text) {
  text = text.trim();
  if (text.startsWith("tsdash1:")) return text;
  const field = (name, re) => {
    const m = text.match(new RegExp("^\\s*" + name + "\\s*=\\s*" + re + "\\s*$", "m"));
    if (!m) throw new Error("this is neither a token nor a key file: no " + name + " in it");
    return m[1];
  };
  const cluster = field("cluster_id", '"([^"]*)"');
  const principal = field("principal", '"([^"]+)"');
  const version = field("key_version", "(\\d+)");
  const secret = field("secret", '"([0-9a-fA-F]{64})"');
  if (!window.crypto || !window.crypto.subtle) {
    throw new Error("this page is not a secure context (served to another host over plain HTTP), " +
      "so it cannot sign with a key here: paste a token from `tessera auth token` instead");
  }
  // The session ends when the token does (12 h at most): a key file gives
  // a 12-hour token, which also tolerates a browser clock that is behind.
  const expiry = Math.floor(Date.now() / 1000) + 12 * 3600;
  const msg = "TSDASH1\n" + cluster + "\n" + principal + "\n" + version + "\n" + expiry;
  const key = await crypto.subtle.importKey("raw", unhex(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = await crypto.subtle.sign("HMAC", key, new TextEncoder().encode(msg));
  return ["tsdash1", principal, version, expiry, hex(mac)].join(":");
}

async function login(ev) {
  ev.preventDefault();
  $("login-error").textContent = "";
  try {
    const token = await tokenFrom($("key").value);
    const r = await call("/api/login", { method: "POST", body: token, headers: { "Content-Type": "text/plain" } });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || ("login failed: HTTP " + r.status));
    $("key").value = "";
    sessionStorage.setItem(SESSION_KEY, body.session);
    start();
  } catch (e) {
    $("login-error").textContent = String(e.message || e);
  }
}

function showLogin() {
  generation++;
  sessionStorage.removeItem(SESSION_KEY);
  $("dashboard").hidden = true;
  $("logout-btn").hidden = true;
  $("me").textContent = "";
  $("login").hidden = false;
}

async function logout() {
  await call("/api/logout", { method: "POST" }).catch(() => {});
  showLogin();
}

// ---- tables --------------------------------------------------------------

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function fill(tbody, rows, build) {
  const frag = document.createDocumentFragment();
  rows.forEach((r) => {
    const tr = document.createElement("tr");
    build(tr, r);
    frag.appendChild(tr);
  });
  tbody.replaceChildren(frag);
}

function kv(tbody, pairs) {
  fill(tbody, pairs, (tr, [k, v]) => { cell(tr, k); cell(tr, String(v), "num"); });
}

function render(s) {
  $("cluster-id").textContent = s.cluster ? "· cluster " + s.cluster.id : "";
  const level = s.health.level;
  for (const el of [$("health-badge"), $("health-level")]) {
    el.textContent = level;
    el.className = (el.id === "health-badge" ? "badge " : "") + level;
  }
  $("health-reasons").textContent = s.health.reasons.length ? ": " + s.health.reasons.join("; ") : "";
  if (s.error) return;
  $("me").textContent = s.me.principal + (s.me.admin ? " (admin)" : " (read-only view)");

  const osds = s.osds;
  const up = osds.filter((o) => o.up).length;
  const inn = osds.filter((o) => o.is_in).length;
  $("osd-count").textContent = osds.length + " OSDs: " + up + " up, " + inn + " in";
  $("osd-count").dataset.total = osds.length;
  $("osd-count").dataset.up = up;
  const sp = s.space;
  $("space").textContent = human(sp.raw_used) + " used of " + human(sp.raw_capacity) +
    " raw; " + human(sp.avail) + " writable at " + sp.copies + " copies";
  $("space-bar").style.width = (sp.raw_capacity ? (100 * sp.raw_used / sp.raw_capacity) : 0).toFixed(1) + "%";
  const r = s.redundancy;
  $("objects").textContent = count(r.objects) + " stripe objects; " + r.degraded + " degraded, " + r.unfound + " unfound";
  const m = s.mds;
  $("mds-summary").textContent = count(s.cluster.inodes) + " inodes; " + count(m.mandatory + m.non_mandatory) + " requests served";
  const rows = s.clients.rows;
  const others = s.clients.others || { principals: 0, connections: 0 };
  const conns = rows.reduce((a, c) => a + c.connections, 0) + others.connections;
  $("client-count").textContent = (rows.length + others.principals) + " principals, " + conns + " connections; " +
    m.early_pending + " early answers pending";

  fill($("osds").tBodies[0], osds, (tr, o) => {
    tr.className = "osd" + (o.up ? "" : " down") + (o.is_in ? "" : " out");
    tr.dataset.id = o.id;
    tr.dataset.up = o.up;
    cell(tr, "osd." + o.id);
    cell(tr, o.host);
    cell(tr, o.addr);
    cell(tr, (o.up ? "up" : "DOWN") + ", " + (o.is_in ? "in" : "OUT"), "state");
    cell(tr, human(o.used), "num");
    cell(tr, human(Math.max(0, o.capacity - o.used)), "num");
    cell(tr, human(o.capacity), "num");
    cell(tr, o.capacity ? (100 * o.used / o.capacity).toFixed(1) + " %" : "–", "num");
    cell(tr, count(o.objects), "num");
    cell(tr, count(o.rates.requests), "num");
    cell(tr, human(o.rates.bytes_out) + "/s", "num");
    cell(tr, human(o.rates.bytes_in) + "/s", "num");
    cell(tr, o.rates.requests ? (o.rates.latency_us / 1000).toFixed(2) + " ms" : "–", "num");
  });

  const pairs = [
    ["stripe objects checked", r.objects], ["degraded", r.degraded], ["misplaced", r.misplaced],
    ["unfound", r.unfound], ["inconsistent (scrub)", r.inconsistent], ["not checked by the last scrub", r.scrub_unchecked],
  ];
  if (r.groups > 0) {
    pairs.push(["replica groups", r.groups], ["groups degraded", r.groups_degraded],
      ["groups filling a new member", r.groups_filling], ["groups unavailable", r.groups_unavailable],
      ["groups that lost every full copy", r.groups_lost]);
  }
  kv($("redundancy").tBodies[0], pairs);
  const rec = s.recovery;
  if (rec.objects_left > 0) {
    $("recovery").textContent = "recovering: " + count(rec.objects_left) + " objects, " + human(rec.bytes_left) +
      " left at " + human(rec.rate_bps) + "/s; time left " + duration(rec.eta_s) + "; " +
      human(rec.bytes_recovered) + " copied since the MDS started";
    const done = rec.bytes_recovered / Math.max(1, rec.bytes_recovered + rec.bytes_left);
    $("recovery-bar").style.width = (100 * done).toFixed(1) + "%";
  } else {
    $("recovery").textContent = "recovery idle; " + human(rec.bytes_recovered) + " copied since the MDS started";
    $("recovery-bar").style.width = "100%";
  }

  fill($("mds-members").tBodies[0], m.members, (tr, x) => {
    cell(tr, x.addr);
    cell(tr, x.role + (m.replicated ? "" : " (single MDS: not replicated)"));
    cell(tr, x.up ? "up" : "DOWN", "state");
    cell(tr, String(x.lag), "num");
  });
  kv($("mds-facts").tBodies[0], [
    ["uptime", duration(m.uptime_s)], ["map epoch", s.cluster.epoch], ["namespace kept on", s.cluster.namespace === "osd" ? "the OSDs" : "the MDS"],
    ["object-id policy", s.cluster.id_policy], ["mandatory requests", count(m.mandatory)], ["non-mandatory requests", count(m.non_mandatory)],
    ["changes answered early, not yet durable", m.early_pending],
    ["files waiting for object deletion", m.delete_queue], ["unlinked files kept while open", m.orphans],
    ["sessions whose replays it waits for", m.replay_wait ? m.replay_wait.sessions + " (" + duration(Math.round(m.replay_wait.ms_left / 1000)) + " left)" : "none"],
  ]);

  const clientRows = rows.slice();
  if (others.principals > 0) {
    clientRows.push({ principal: others.principals + " other principals", connections: others.connections, early_sessions: "–" });
  }
  fill($("clients").tBodies[0], clientRows, (tr, c) => {
    cell(tr, c.principal);
    cell(tr, String(c.connections), "num");
    cell(tr, String(c.early_sessions), "num");
  });

  $("principals-section").hidden = !Array.isArray(s.principals);
  if (Array.isArray(s.principals)) {
    fill($("principals").tBodies[0], s.principals, (tr, p) => {
      cell(tr, p.name); cell(tr, p.path); cell(tr, p.access); cell(tr, p.uids);
      cell(tr, p.admin ? "yes" : "no"); cell(tr, String(p.key_version), "num");
      cell(tr, new Date(p.created_ms).toISOString().slice(0, 16).replace("T", " "));
    });
  }
}

// ---- charts (SVG, drawn here: a title, units on both axes, a legend) -----

const SVGNS = "http://www.w3.org/2000/svg";

function el(parent, name, attrs, text) {
  const e = document.createElementNS(SVGNS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  parent.appendChild(e);
  return e;
}

// The top of an axis at or above `v`, four round steps high: a step of
// 1, 2 or 5 times a power of ten, or (bytes, `binary`) a power of two
// times a power of 1024, so byte ticks read 256 MiB rather than 268 MB.
function niceMax(v, binary) {
  const want = Math.max(v, 1) / 4;
  let step = 1;
  if (binary) {
    while (step < want) step *= 2;
  } else {
    const p = Math.pow(10, Math.floor(Math.log10(want)));
    step = [1, 2, 5, 10].map((m) => Math.max(1, m * p)).find((x) => x >= want);
  }
  return 4 * step;
}

function clock(t) {
  const d = new Date(t);
  return String(d.getHours()).padStart(2, "0") + ":" + String(d.getMinutes()).padStart(2, "0");
}

function chart(fig, title, yTitle, fmt, binary, series) {
  const W = 460, H = 230, L = 84, R = 22, T = 26, B = 58;
  const now = serverNow();
  const t0 = now - HOUR_MS;
  const svg = document.createElementNS(SVGNS, "svg");
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", title);
  el(svg, "text", { x: W / 2, y: 16, "text-anchor": "middle", class: "title" }, title);
  const max = niceMax(Math.max(0, ...series.flatMap((s) => s.points.map((p) => p[1]))), binary);
  const x = (t) => L + (W - L - R) * (t - t0) / HOUR_MS;
  const y = (v) => T + (H - T - B) * (1 - v / max);
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4;
    el(svg, "line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: i ? "grid" : "axis" });
    el(svg, "text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, fmt(v));
  }
  // A tick at every whole ten minutes of the MDS's clock.
  const TEN = 600000;
  for (let t = Math.ceil(t0 / TEN) * TEN; t <= now; t += TEN) {
    el(svg, "line", { x1: x(t), x2: x(t), y1: H - B, y2: H - B + 4, class: "axis" });
    el(svg, "text", { x: x(t), y: H - B + 16, "text-anchor": "middle" }, clock(t));
  }
  el(svg, "line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" });
  el(svg, "text", { x: (L + W - R) / 2, y: H - B + 32, "text-anchor": "middle" }, "time of day (last hour, one point every 5 s)");
  el(svg, "text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle", transform: "rotate(-90 12 " + (T + H - B) / 2 + ")" }, yTitle);
  let lx = L;
  series.forEach((s) => {
    const pts = s.points.filter((p) => p[0] >= t0).map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1));
    if (pts.length === 1) el(svg, "circle", { cx: pts[0].split(",")[0], cy: pts[0].split(",")[1], r: 2.5, fill: s.color });
    if (pts.length > 1) el(svg, "polyline", { points: pts.join(" "), fill: "none", stroke: s.color, "stroke-width": 1.8 });
    el(svg, "rect", { x: lx, y: H - 14, width: 12, height: 4, fill: s.color });
    const label = el(svg, "text", { x: lx + 16, y: H - 10 }, s.name);
    lx += 24 + 7 * s.name.length;
    return label;
  });
  fig.replaceChildren(svg);
}

function drawCharts() {
  const p = (f) => history.map((h) => [h.t_ms, f(h)]);
  const rate = (v) => human(v) + "/s";
  chart($("chart-bytes"), "OSD data throughput (every copy counted)", "bytes per second", rate, true, [
    { name: "read", color: "#3867d6", points: p((h) => h.read_bps) },
    { name: "written", color: "#e67e22", points: p((h) => h.write_bps) },
  ]);
  chart($("chart-iops"), "OSD requests carrying data", "requests per second", count, false, [
    { name: "reads", color: "#3867d6", points: p((h) => h.read_iops) },
    { name: "writes", color: "#e67e22", points: p((h) => h.write_iops) },
  ]);
  chart($("chart-meta"), "Metadata requests at the MDS", "requests per second", count, false, [
    { name: "MDS requests", color: "#8854d0", points: p((h) => h.meta_ops) },
  ]);
}

// ---- polling -------------------------------------------------------------

async function pollState(mine) {
  try {
    const r = await call("/api/state");
    if (mine !== generation) return;
    if (r.status === 401) return showLogin();
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
    if (mine !== generation) return;
    if (body.now_ms) skewMs = body.now_ms - Date.now();
    render(body);
    lastOk = Date.now();
    $("stale").hidden = true;
    $("updated").textContent = "updated " + new Date(lastOk).toLocaleTimeString() + " · refreshes 2 s after each answer";
  } catch (e) {
    $("stale").hidden = false;
    $("stale").textContent = "cannot reach the MDS (" + (e.message || e) + ")" +
      (lastOk ? "; showing what it said at " + new Date(lastOk).toLocaleTimeString() : "");
  }
}

async function pollHistory(mine) {
  try {
    const r = await call("/api/history?after=" + lastSeq);
    if (mine !== generation) return;
    if (r.status === 401) return showLogin();
    if (!r.ok) return;
    const h = await r.json();
    if (mine !== generation) return;
    if (h.now_ms) skewMs = h.now_ms - Date.now();
    if (h.points.length) {
      lastSeq = h.points[h.points.length - 1].seq;
      history = history.concat(h.points).filter((p) => p.t_ms >= serverNow() - HOUR_MS);
    }
  } catch (e) {
    // The state poll reports an unreachable MDS.
  }
  drawCharts();
}

// Runs `f` now and again `every` ms after each run ends (so a slow link
// never piles requests up), until the next login or logout.
function every(f, ms) {
  const mine = generation;
  const run = async () => {
    if (mine !== generation) return;
    await f(mine);
    if (mine === generation) setTimeout(run, ms);
  };
  run();
}

function start() {
  $("login").hidden = true;
  $("dashboard").hidden = false;
  $("logout-btn").hidden = false;
  generation++;
  history = [];
  lastSeq = 0;
  every(pollState, STATE_EVERY_MS);
  every(pollHistory, HISTORY_EVERY_MS);
}

document.addEventListener("DOMContentLoaded", async () => {
  $("login-form").addEventListener("submit", login);
  $("logout-btn").addEventListener("click", logout);
  // A session of this tab survives a reload; otherwise log in.
  const r = session() ? await call("/api/state").catch(() => null) : null;
  if (r && r.ok) return start();
  showLogin();
  if (r && r.status !== 401) {
    const body = await r.json().catch(() => ({}));
    $("login-error").textContent = body.error || ("the dashboard answered HTTP " + r.status);
  }
});
