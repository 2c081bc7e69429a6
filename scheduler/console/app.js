// The Chime console: a single page over the HTTP API (/api/v1/), with no
// build step and no dependencies. Every value from the server is put into
// the page as text (never as HTML), and every change is an API call with the
// session's CSRF token.
"use strict";

const session = { user: null, role: null, csrf: "", open: false };
const ROLES = ["viewer", "operator", "admin"];
let events = null;
const eventListeners = new Set();
const trend = { started: [], lateness: [] };

// ---- Small DOM and API helpers -------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "text") el.textContent = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function mayDo(access) {
  return ROLES.indexOf(session.role) >= ROLES.indexOf(access);
}

async function api(method, path, body) {
  const headers = { "x-chime-console": "1" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (method !== "GET" && session.csrf) headers["x-chime-csrf"] = session.csrf;
  let response;
  try {
    response = await fetch(path, {
      method, headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    return { ok: false, status: 0, error: { code: "unavailable", message: "cannot reach the server: " + e } };
  }
  let data = null;
  if (response.status !== 204) {
    try { data = await response.json(); } catch (e) { data = null; }
  }
  if (response.status === 401 && !path.endsWith("/session")) {
    showLogin("Your session has ended; log in again.");
  }
  if (response.ok) return { ok: true, status: response.status, data };
  return { ok: false, status: response.status, error: (data && data.error) || { code: "internal", message: "HTTP " + response.status } };
}

// A message at the top of the page, with the reply's `warnings` (field
// and message each) listed under it.
function flash(message, bad, warnings) {
  const el = document.getElementById("flash");
  const list = (warnings || []).length
    ? h("ul", { id: "flash-warnings" }, warnings.map((w) => h("li", {}, h("strong", { text: "warning " }), (w.field ? w.field + ": " : "") + w.message)))
    : null;
  el.replaceChildren(...[message || "", list].filter(Boolean));
  el.className = bad ? "bad" : (list ? "warn" : "");
}

// A flash shown by the next page instead of cleared by it (a save that
// moves to the job's page keeps its message and warnings).
let nextFlash = null;
function flashNext(message, bad, warnings) { nextFlash = [message, bad, warnings]; }

// The error object of a failed reply as `{ field, message, code }` items:
// every problem `details` lists, or the error itself.
function problems(error) {
  const details = error.details && error.details.length ? error.details : [error];
  return details.map((d) => ({ field: d.field || "", message: d.message, code: error.code }));
}

function stateBadge(state) {
  return h("span", { class: "state state-" + state, text: state });
}

function fmtTime(text, tz) {
  if (!text) return "";
  const d = new Date(text);
  return new Intl.DateTimeFormat("en-GB", {
    timeZone: tz || "UTC", year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false,
  }).format(d);
}

function offsetOf(text, tz) {
  const parts = new Intl.DateTimeFormat("en-US", { timeZone: tz, timeZoneName: "longOffset" })
    .formatToParts(new Date(text));
  const part = parts.find((p) => p.type === "timeZoneName");
  return part ? part.value : "";
}

function duration(a, b) {
  if (!a || !b) return "";
  const ms = new Date(b) - new Date(a);
  return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
}

function table(headers, rows, id) {
  return h("div", { class: "table-wrap" },
    h("table", { id },
      h("thead", {}, h("tr", {}, headers.map((x) => h("th", { scope: "col" }, x)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: headers.length, class: "muted", text: "Nothing yet." })))));
}

function spark(values, label) {
  const w = 300, hgt = 60;
  const max = Math.max(1, ...values);
  const points = values.map((v, i) =>
    `${(i / Math.max(1, values.length - 1)) * w},${hgt - (v / max) * (hgt - 4) - 2}`).join(" ");
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points);
  svg.append(line);
  return svg;
}

// ---- Live updates ----------------------------------------------------------

function startEvents() {
  if (events) return;
  events = new EventSource("/api/v1/events");
  events.addEventListener("overview", (e) => {
    let overview;
    try { overview = JSON.parse(e.data); } catch (err) { return; }
    trend.started.push(overview.started_per_second);
    trend.lateness.push(overview.lateness_p99_ms || 0);
    for (const series of Object.values(trend)) if (series.length > 60) series.shift();
    for (const listener of eventListeners) listener(overview);
  });
}

function stopEvents() {
  if (events) events.close();
  events = null;
}

// ---- Login -------------------------------------------------------------------

function showLogin(message) {
  stopEvents();
  session.user = null;
  document.getElementById("nav").hidden = true;
  document.getElementById("who").hidden = true;
  const error = h("p", { class: "error", id: "login-error", role: "alert", text: message || "" });
  const user = h("input", { id: "login-user", name: "user", autocomplete: "username", required: true });
  const password = h("input", { id: "login-password", name: "password", type: "password", autocomplete: "current-password", required: true });
  const form = h("form", { class: "panel login", id: "login-form", onsubmit: async (e) => {
    e.preventDefault();
    const r = await api("POST", "/api/v1/session", { user: user.value, password: password.value });
    if (!r.ok) { error.textContent = r.error.message; password.value = ""; password.focus(); return; }
    Object.assign(session, r.data);
    signedIn();
  } },
  h("h1", { text: "Log in to Chime" }),
  h("div", { class: "field" }, h("label", { for: "login-user", text: "User" }), user),
  h("div", { class: "field" }, h("label", { for: "login-password", text: "Password" }), password),
  error,
  h("button", { type: "submit", class: "primary", id: "login-submit", text: "Log in" }));
  render(form);
  user.focus();
}

function signedIn() {
  document.getElementById("nav").hidden = false;
  document.getElementById("who").hidden = session.open;
  document.getElementById("who-name").textContent = `${session.user} (${session.role})`;
  startEvents();
  route();
}

async function logout() {
  await api("DELETE", "/api/v1/session");
  session.csrf = "";
  showLogin("You are logged out.");
}

// ---- Pages -------------------------------------------------------------------

function render(...nodes) {
  eventListeners.clear();
  const view = document.getElementById("view");
  view.replaceChildren(...nodes);
}

function overviewPage() {
  const cards = h("div", { class: "cards", id: "overview-cards" });
  const charts = h("div", { class: "charts" });
  const alerts = h("div", { id: "overview-alerts" });
  const paint = (o) => {
    const card = (label, value, id) => h("div", { class: "card", id },
      h("div", { class: "value", text: value }), h("div", { class: "label", text: label }));
    cards.replaceChildren(
      card("firings started / s", o.started_per_second.toFixed(1), "card-rate"),
      card("start lateness p99", o.lateness_p99_ms === null ? "–" : o.lateness_p99_ms + " ms", "card-lateness"),
      card(`succeeded (${Math.round(o.window_seconds)} s)`, o.succeeded, "card-succeeded"),
      card(`failed (${Math.round(o.window_seconds)} s)`, o.failed, "card-failed"),
      card("executing", o.executing, "card-executing"),
      card("dead letters", o.dead_letters, "card-dead"),
      card("workers up", o.workers_up, "card-workers"));
    charts.replaceChildren(
      h("div", { class: "panel" }, h("div", { class: "muted", text: "firings started / s" }), spark(trend.started, "firings started per second, last two minutes")),
      h("div", { class: "panel" }, h("div", { class: "muted", text: "start lateness p99 (ms)" }), spark(trend.lateness, "start lateness p99, last two minutes")));
    alerts.replaceChildren(table(["at", "kind", "job", "message"], o.alerts.map((a) =>
      h("tr", {}, h("td", { text: fmtTime(a.at) }), h("td", {}, stateBadge(a.kind)),
        h("td", {}, a.job_id ? h("a", { href: "#/jobs/" + encodeURIComponent(a.job_id), text: a.job_id }) : ""),
        h("td", { text: a.message })))));
  };
  render(h("h1", { text: "Overview" }), cards, charts, h("h2", { text: "Recent alerts" }), alerts,
    h("p", { class: "muted", text: "Updated live every two seconds; times in UTC." }));
  eventListeners.add(paint);
  api("GET", "/api/v1/overview").then((r) => { if (r.ok) paint(r.data); });
}

// The page's jobs ordered by `last_success_at`: `last_success` puts jobs
// that never succeeded first, then the oldest success; `-last_success`
// the reverse. Anything else keeps the API's order.
function sortByLastSuccess(jobs, sort) {
  if (sort !== "last_success" && sort !== "-last_success") return jobs;
  const at = (j) => (j.last_success_at ? Date.parse(j.last_success_at) : -Infinity);
  const sign = sort === "last_success" ? 1 : -1;
  return [...jobs].sort((a, b) => sign * (at(a) - at(b)) || a.id.localeCompare(b.id));
}

async function jobsPage(params) {
  const query = new URLSearchParams(params);
  const group = h("input", { id: "filter-group", name: "group", value: query.get("group") || "", size: 12 });
  const state = h("select", { id: "filter-state", name: "state" },
    ["", "active", "paused", "completed"].map((s) => h("option", { value: s, text: s || "any", selected: s === (query.get("state") || "") })));
  const selector = h("input", { id: "filter-selector", name: "selector", value: query.get("selector") || "", placeholder: "team=data,env!=dev", size: 18 });
  const search = h("input", { id: "filter-search", name: "q", value: query.get("q") || "", placeholder: "id contains", size: 14 });
  const go = (extra) => {
    const next = new URLSearchParams();
    for (const [k, el] of [["group", group], ["state", state], ["selector", selector], ["q", search]]) if (el.value) next.set(k, el.value);
    if (query.get("sort")) next.set("sort", query.get("sort"));
    for (const [k, v] of Object.entries(extra || {})) next.set(k, v);
    location.hash = "#/jobs?" + next.toString();
  };
  const toolbar = h("form", { class: "toolbar", onsubmit: (e) => { e.preventDefault(); go(); } },
    h("div", {}, h("label", { for: "filter-search", text: "Search" }), search),
    h("div", {}, h("label", { for: "filter-group", text: "Group" }), group),
    h("div", {}, h("label", { for: "filter-state", text: "State" }), state),
    h("div", {}, h("label", { for: "filter-selector", text: "Labels" }), selector),
    h("button", { type: "submit", text: "Filter" }));
  render(h("h1", { text: "Jobs" }), toolbar, h("p", { class: "muted", text: "Loading…" }));
  const request = new URLSearchParams();
  for (const key of ["group", "state", "selector", "after"]) if (query.get(key)) request.set(key, query.get(key));
  request.set("limit", "50");
  const r = await api("GET", "/api/v1/jobs?" + request.toString());
  if (!r.ok) { render(h("h1", { text: "Jobs" }), toolbar, h("p", { class: "error", role: "alert", text: r.error.message })); return; }
  const needle = (query.get("q") || "").toLowerCase();
  const sort = query.get("sort") || "";
  const jobs = sortByLastSuccess(r.data.jobs.filter((j) => !needle || j.id.toLowerCase().includes(needle)), sort);
  const boxes = [];
  const rows = jobs.map((j) => {
    const box = h("input", { type: "checkbox", value: j.id, "aria-label": "select " + j.id });
    boxes.push(box);
    const schedule = scheduleText(j);
    return h("tr", {}, h("td", {}, box),
      h("td", {}, h("a", { href: "#/jobs/" + encodeURIComponent(j.id), text: j.id })),
      h("td", { text: j.group }), h("td", {}, stateBadge(j.state)), h("td", { class: "hide-narrow", text: schedule }),
      h("td", { class: "hide-narrow", text: j.next_fire_at ? fmtTime(j.next_fire_at) : "–" }),
      h("td", { class: "last-success", text: j.last_success_at ? fmtTime(j.last_success_at) : "never" }),
      h("td", { class: "hide-narrow", text: Object.entries(j.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ") }));
  });
  const bulk = async (action) => {
    const ids = boxes.filter((b) => b.checked).map((b) => b.value);
    if (!ids.length) { flash("Select jobs first.", true); return; }
    let failed = 0;
    for (const id of ids) {
      const result = await api("POST", `/api/v1/jobs/${encodeURIComponent(id)}/${action}`, {});
      if (!result.ok) failed++;
    }
    flash(failed ? `${action}: ${failed} of ${ids.length} failed.` : `${action}d ${ids.length} job(s).`, failed > 0);
    jobsPage(params);
  };
  const canOperate = mayDo("operator");
  // Every job the group and label filters match, in one request.
  const bulkMatching = async (action) => {
    const selection = {};
    if (query.get("group")) selection.group = query.get("group");
    if (query.get("selector")) selection.selector = query.get("selector");
    if (!selection.group && !selection.selector) { flash("Filter by group or labels first.", true); return; }
    const result = await api("POST", `/api/v1/verbs/jobs.${action}`, selection);
    flash(result.ok ? `${action}d ${result.data.jobs.length} matching job(s).` : result.error.message, !result.ok);
    if (result.ok) jobsPage(params);
  };
  const filtered = Boolean(query.get("group") || query.get("selector"));
  const actions = h("div", { class: "actions" },
    h("button", { type: "button", id: "bulk-pause", disabled: !canOperate, onclick: () => bulk("pause"), text: "Pause selected" }),
    h("button", { type: "button", id: "bulk-resume", disabled: !canOperate, onclick: () => bulk("resume"), text: "Resume selected" }),
    h("button", { type: "button", id: "match-pause", disabled: !canOperate || !filtered, onclick: () => bulkMatching("pause"), text: "Pause all matching" }),
    h("button", { type: "button", id: "match-resume", disabled: !canOperate || !filtered, onclick: () => bulkMatching("resume"), text: "Resume all matching" }),
    mayDo("admin") ? h("a", { class: "button", href: "#/new", text: "New job" }) : null);
  const pages = h("div", { class: "actions" },
    query.get("after") ? h("button", { type: "button", onclick: () => go({}), text: "First page" }) : null,
    r.data.next ? h("button", { type: "button", id: "next-page", onclick: () => go({ after: r.data.next }), text: "Next page" }) : null);
  // Sorting is of the loaded page (the API pages jobs newest first); the
  // heading says so, and the first click puts the stalest job on top.
  const nextSort = sort === "last_success" ? "-last_success" : "last_success";
  const sortButton = h("button", { type: "button", class: "link", id: "sort-last-success",
    onclick: () => go(Object.assign({}, query.get("after") ? { after: query.get("after") } : {}, { sort: nextSort })),
    text: "last success (UTC)" + (sort === "last_success" ? " ▲" : sort === "-last_success" ? " ▼" : "") });
  const sortNote = sort ? h("p", { class: "muted", id: "sort-note",
    text: `Sorted within this page by last success, ${sort === "last_success" ? "stalest (never succeeded) first" : "newest first"}.` }) : null;
  render(h("h1", { text: "Jobs" }), toolbar, actions, sortNote,
    table(["", "id", "group", "state", "schedule", "next (UTC)", sortButton, "labels"], rows, "jobs"), pages);
}

// A job's schedule in a few words; a fan-in names the jobs it waits for and
// those of them that do not exist.
function scheduleText(j) {
  const s = j.schedule;
  if (s.after) {
    const missing = (j.upstream_missing || []).length ? ` (missing: ${j.upstream_missing.join(", ")})` : "";
    return "after " + s.after.join(", ") + (s.within ? " within " + s.within : "") + missing;
  }
  return s.cron ? `${s.cron} (${s.tz})` : s.every ? "every " + s.every : "at " + s.at;
}

async function jobPage(id) {
  const r = await api("GET", "/api/v1/jobs/" + encodeURIComponent(id));
  if (!r.ok) { render(h("h1", { text: id }), h("p", { class: "error", role: "alert", text: r.error.message })); return; }
  const job = r.data.job;
  const tz = job.schedule.tz || "UTC";
  const historyBox = h("div", { id: "history-box" });
  const nextBox = h("div", { id: "next-box" });
  const act = async (action, body) => {
    const result = await api("POST", `/api/v1/jobs/${encodeURIComponent(id)}/${action}`, body || {});
    if (!result.ok) { flash(result.error.message, true); return; }
    flash(action === "trigger" ? `Triggered: firing ${result.data.firing_id}` : `Job ${action}d.`);
    if (action !== "trigger") jobPage(id); else loadHistory();
  };
  const remove = async () => {
    if (!confirm(`Delete job ${id}? Its history stays until retention removes it.`)) return;
    const result = await api("DELETE", "/api/v1/jobs/" + encodeURIComponent(id));
    if (!result.ok) { flash(result.error.message, true); return; }
    flash(`Deleted ${id}.`);
    location.hash = "#/jobs";
  };
  const canOperate = mayDo("operator"), canAdmin = mayDo("admin");
  const loadHistory = async () => {
    const f = await api("GET", `/api/v1/firings?job_id=${encodeURIComponent(id)}&limit=20`);
    if (!f.ok) { historyBox.replaceChildren(h("p", { class: "error", text: f.error.message })); return; }
    const cancellable = ["staged", "published", "executing"];
    const sharded = f.data.firings.some((x) => x.shard !== undefined && x.shard !== null);
    historyBox.replaceChildren(table(["scheduled (UTC)", ...(sharded ? ["shard"] : []), "attempt", "state", "worker", "duration", "output / error", ""],
      f.data.firings.map((x) => h("tr", { "data-firing": x.id },
        h("td", {}, h("a", { href: firingHref(x.id), text: fmtTime(x.scheduled_at) }), x.backfill ? " (backfill)" : ""),
        ...(sharded ? [h("td", { class: "shard", text: x.shard ?? "" })] : []),
        h("td", { text: x.attempt }), h("td", {}, firingState(x)),
        // A broadcast's share names its worker before it starts.
        h("td", { text: x.worker || (x.worker_id ? "for " + x.worker_id : "") }), h("td", { text: duration(x.started_at, x.finished_at) }),
        h("td", { class: "excerpt" }, x.error ? h("span", { class: "error", text: excerpt(x.error) }) : "",
          x.output ? h("pre", { text: excerpt(x.output) }) : "",
          (x.error || x.output) ? h("a", { href: firingHref(x.id), text: "whole firing" }) : ""),
        h("td", {}, cancellable.includes(x.state) && canOperate
          ? h("button", { type: "button", class: "danger", "data-cancel": x.id, onclick: () => cancelFiring(x.id), text: "Cancel" })
          : ""))), "history"));
  };
  const cancelFiring = async (firingId) => {
    const result = await api("POST", `/api/v1/firings/${encodeURIComponent(firingId)}/cancel`, {});
    flash(result.ok ? `Cancelling ${firingId}.` : result.error.message, !result.ok);
    loadHistory();
  };
  const changesBox = h("div", { id: "changes-box" });
  const loadChanges = async () => {
    const a = await api("GET", `/api/v1/audit?target=${encodeURIComponent(id)}&limit=10`);
    if (!a.ok) { changesBox.replaceChildren(h("p", { class: "error", text: a.error.message })); return; }
    changesBox.replaceChildren(table(["at (UTC)", "who", "what", "version", "outcome"],
      a.data.entries.map((e) => h("tr", {}, h("td", { text: fmtTime(e.at) }), h("td", { text: `${e.actor} (${e.via})` }),
        h("td", { text: e.verb }), h("td", { text: `${e.before_version ?? "–"} → ${e.after_version ?? "–"}` }),
        h("td", { text: e.outcome === "ok" ? "ok" : `${e.outcome}: ${e.message || ""}` }))), "changes"));
  };
  const backfillFrom = whenField("backfill-from", "Backfill from", "-1d");
  const backfillTo = whenField("backfill-to", "to (not included)", "now");
  const backfillError = h("div", { class: "error", id: "backfill-error", role: "alert" });
  const backfillResult = h("output", { id: "backfill-result", class: "result", for: "backfill-from backfill-to" });
  // Both ends resolve against one `now`, so `-1d` to `now` is exactly a day.
  const backfill = async (dryRun) => {
    backfillError.textContent = "";
    backfillResult.textContent = "";
    const now = new Date();
    const [from, to] = [backfillFrom.resolve(now), backfillTo.resolve(now)];
    const bad = [["from", from], ["to", to]].find(([, r]) => r.error || !r.at);
    if (bad) { backfillError.textContent = `${bad[0]}: ${bad[1].error || "is required"}`; return; }
    const body = { from: from.at.toISOString(), to: to.at.toISOString(), dry_run: dryRun || undefined };
    const result = await api("POST", `/api/v1/jobs/${encodeURIComponent(id)}/backfill`, body);
    if (!result.ok) { backfillError.textContent = (result.error.field ? result.error.field + ": " : "") + result.error.message; return; }
    const n = result.data.firing_ids.length, skipped = result.data.skipped_by_overlap || 0;
    const overlap = skipped ? `, up to ${skipped} of them skipped by the overlap policy` : "";
    const said = dryRun ? `Dry run: ${n} firing(s) would be staged${overlap}; nothing was staged.` : `Backfill: ${n} firing(s) staged${overlap}.`;
    flash(said, false, result.data.warnings);
    backfillResult.textContent = said + (result.data.warnings || []).map((w) => ` Warning: ${w.field}: ${w.message}`).join("");
    if (!dryRun) loadHistory();
  };
  const backfillForm = h("form", { class: "toolbar", id: "backfill-form", onsubmit: (e) => { e.preventDefault(); backfill(false); } },
    backfillFrom.field, backfillTo.field,
    h("button", { type: "button", id: "backfill-dry-run", disabled: !canOperate, onclick: () => backfill(true), text: "Dry run" }),
    h("button", { type: "submit", id: "backfill-submit", disabled: !canOperate, text: "Backfill" }), backfillError, backfillResult);
  const pauseUntil = whenField("pause-until", "Pause until (empty: until resumed)", "+2h");
  const pauseError = h("div", { class: "error", id: "pause-error", role: "alert" });
  const pause = (e) => {
    e.preventDefault();
    const until = pauseUntil.resolve(new Date());
    if (until.error) { pauseError.textContent = "until: " + until.error; return; }
    act("pause", until.at ? { until: until.at.toISOString() } : {});
  };
  const pauseForm = job.state === "paused" ? null : h("form", { class: "toolbar", id: "pause-form", onsubmit: pause },
    pauseUntil.field,
    h("button", { type: "submit", id: "job-pause", disabled: !canOperate, text: "Pause" }), pauseError);
  const loadNext = async () => {
    // A fan-in has no instants: it fires when its upstream jobs have succeeded.
    if (job.schedule.after) { nextBox.replaceChildren(h("p", { class: "muted", text: "Fires once every job it waits for has succeeded: " + scheduleText(job) })); return; }
    const p = await api("POST", "/api/v1/preview", previewRequest(job, 10));
    if (!p.ok) { nextBox.replaceChildren(h("p", { class: "error", text: p.error.message })); return; }
    nextBox.replaceChildren(instantsTable(p.data.times, tz, p.data.marks));
  };
  render(
    h("h1", {}, job.id, " ", stateBadge(job.state)),
    h("div", { class: "actions" },
      h("button", { type: "button", id: "job-trigger", class: "primary", disabled: !canOperate, onclick: () => act("trigger"), text: "Trigger now" }),
      job.state === "paused"
        ? h("button", { type: "button", id: "job-resume", disabled: !canOperate, onclick: () => act("resume"), text: "Resume" })
        : null,
      h("a", { class: "button", id: "job-edit", href: `#/jobs/${encodeURIComponent(id)}/edit`, "aria-disabled": !canAdmin, text: "Edit" }),
      h("button", { type: "button", id: "job-delete", class: "danger", disabled: !canAdmin, onclick: remove, text: "Delete" })),
    h("p", { class: "muted", id: "job-facts" }, `group ${job.group} · handler ${job.handler} · version ${job.version} · next `,
      job.next_fire_at ? fmtTime(job.next_fire_at) + " UTC" : "none",
      job.paused_until ? ` · paused until ${fmtTime(job.paused_until)} UTC` : "",
      " · last success ", job.last_success_at ? fmtTime(job.last_success_at) + " UTC" : "never"),
    pauseForm,
    h("h2", { text: "History" }), historyBox,
    h("h2", { text: `Next instants (${tz} and UTC)` }), nextBox,
    h("h2", { text: "Re-run the past" }), backfillForm,
    h("h2", { text: "Changes" }), changesBox,
    h("h2", { text: "Specification" }), h("pre", { id: "job-spec", text: JSON.stringify(specOf(job), null, 2) }));
  loadHistory();
  loadNext();
  loadChanges();
  eventListeners.add(() => loadHistory());
}

// The rows of a preview: each instant in the job's zone and in UTC, with
// what the server marked (moved out of a daylight-saving gap, repeated at
// fall-back, excluded by a calendar) and the rows where the zone's offset
// changed.
function instantsTable(times, tz, marks) {
  let previous = null;
  const rows = times.map((t, i) => {
    const offset = offsetOf(t, tz);
    const changed = previous !== null && offset !== previous;
    previous = offset;
    const mark = (marks || [])[i] || {};
    const notes = [];
    if (mark.dst === "shifted") notes.push("moved out of a daylight-saving gap");
    if (mark.dst === "repeated") notes.push("repeated local time (fall-back)");
    if (mark.excluded) notes.push(`skipped: calendar ${mark.excluded}`);
    if (changed) notes.push("daylight-saving change: offset now " + offset);
    return h("tr", {}, h("td", { text: fmtTime(t, tz) + " " + offset }), h("td", { text: fmtTime(t) }),
      h("td", {}, notes.length ? h("span", { class: "dst", text: "⚠ " + notes.join("; ") }) : ""));
  });
  return table([`local (${tz})`, "UTC", ""], rows, "instants");
}

// A preview request for a spec: its schedule with the fields that change
// its instants (H and jitter need the id).
function previewRequest(spec, count) {
  return { schedule: spec.schedule, count, id: spec.id || undefined, dst: spec.dst, jitter: spec.jitter, exclude: spec.exclude };
}

const READ_ONLY = ["state", "next_fire_at", "version", "created_at", "updated_at", "upstream_missing"];
function specOf(job) {
  const spec = {};
  for (const [k, v] of Object.entries(job)) if (!READ_ONLY.includes(k)) spec[k] = v;
  return spec;
}

// The job form: fields for the common settings, or the whole spec as JSON.
// Validation errors from the server appear next to the field they name.
function jobForm(existing) {
  const spec = existing ? specOf(existing) : {
    id: "", group: "default", schedule: { cron: "0 * * * * *", tz: "UTC" }, handler: "shell",
    payload: { argv: ["echo", "hello"] }, priority: 5, timeout: "1h", overlap: "allow", misfire: "fire_once",
  };
  const kind = spec.schedule.cron !== undefined ? "cron" : spec.schedule.every !== undefined ? "every" : spec.schedule.after !== undefined ? "after" : "at";
  const fields = {};
  const errors = {};
  const field = (name, label, control, wide) => {
    fields[name] = control;
    control.id = "field-" + name.replace(/\./g, "-");
    errors[name] = h("div", { class: "error", "data-error-for": name, id: control.id + "-error" });
    control.setAttribute("aria-describedby", errors[name].id);
    return h("div", { class: "field" + (wide ? " wide" : ""), "data-field": name },
      h("label", { for: control.id, text: label }), control, errors[name]);
  };
  const input = (value, attrs) => h("input", Object.assign({ value: value === undefined ? "" : value }, attrs || {}));
  const select = (value, options) => h("select", {}, options.map((o) => h("option", { value: o, text: o, selected: o === value })));
  // The payload's editor follows the handler: a new kind of handler
  // starts from an empty payload of its shape, raw JSON keeps what it had.
  const editorKind = (handler) => (handler === "shell" || handler === "http" ? handler : "raw");
  let editor = payloadEditor(spec.handler, spec.payload);
  let editorFor = editorKind(spec.handler);
  const payloadSlot = h("div", { class: "field wide", id: "payload-editor" }, editor.node);
  const switchPayload = () => {
    const handler = fields.handler.value.trim();
    if (editorKind(handler) === editorFor) return;
    let carried = null;
    try { carried = editorFor === "raw" || editorKind(handler) === "raw" ? editor.read() : null; } catch (e) { carried = null; }
    editor = payloadEditor(handler, editorKind(handler) === "raw" ? carried : null);
    editorFor = editorKind(handler);
    payloadSlot.replaceChildren(editor.node);
  };
  const scheduleValue = kind === "cron" ? spec.schedule.cron : kind === "every" ? spec.schedule.every : kind === "after" ? spec.schedule.after.join(", ") : spec.schedule.at;
  const general = h("div", { class: "form" },
    field("id", "Id", input(spec.id, { readonly: existing ? true : null, required: true })),
    field("group", "Group", input(spec.group)),
    field("schedule.kind", "Schedule kind", select(kind, ["cron", "every", "at", "after"])),
    field("schedule.value", "Cron expression, interval, time or job ids (after)", input(scheduleValue, { required: true })),
    field("schedule.tz", "Time zone", input(spec.schedule.tz || "UTC")),
    field("handler", "Handler (shell, http, or your own)", input(spec.handler, { list: "handlers" })),
    field("priority", "Priority (0–9)", input(spec.priority, { type: "number", min: 0, max: 9 })),
    field("timeout", "Timeout", input(spec.timeout)),
    field("retry.max_attempts", "Attempts", input((spec.retry || {}).max_attempts || 1, { type: "number", min: 1 })),
    field("overlap", "Overlap", select(spec.overlap || "allow", ["allow", "forbid", "queue", "replace"])),
    field("misfire", "Misfire", select(spec.misfire || "fire_once", ["fire_once", "fire_all", "skip"])),
    h("datalist", { id: "handlers" }, h("option", { value: "shell" }), h("option", { value: "http" })),
    payloadSlot);
  const json = h("textarea", { id: "field-json", rows: 18, "aria-label": "job as JSON", text: JSON.stringify(spec, null, 2) });
  const jsonError = h("div", { class: "error", "data-error-for": "", id: "json-error" });
  const jsonPane = h("div", { hidden: true }, json, jsonError);
  const preview = h("div", { id: "schedule-preview", "aria-live": "polite" });
  const topError = h("div", { class: "error", id: "form-error", role: "alert" });
  let mode = "form";
  const fromForm = () => {
    const out = Object.assign({}, spec);
    out.id = fields.id.value.trim();
    out.group = fields.group.value.trim();
    const k = fields["schedule.kind"].value, v = fields["schedule.value"].value.trim();
    // A fan-in's `within` has no form field: kept as it was (the JSON tab edits it).
    const after = () => Object.assign({ after: v.split(",").map((x) => x.trim()).filter((x) => x) }, spec.schedule.within ? { within: spec.schedule.within } : {});
    out.schedule = k === "cron" ? { cron: v, tz: fields["schedule.tz"].value.trim() || "UTC" } : k === "every" ? { every: v } : k === "after" ? after() : { at: v };
    out.handler = fields.handler.value.trim();
    out.priority = Number(fields.priority.value);
    out.timeout = fields.timeout.value.trim();
    out.retry = Object.assign({}, spec.retry || {}, { max_attempts: Number(fields["retry.max_attempts"].value) });
    out.overlap = fields.overlap.value;
    out.misfire = fields.misfire.value;
    out.payload = editor.read();
    return out;
  };
  const current = () => {
    if (mode === "json") {
      try { return JSON.parse(json.value); } catch (e) { throw { field: "", message: "not valid JSON: " + e.message }; }
    }
    return fromForm();
  };
  const clearErrors = () => {
    topError.textContent = ""; jsonError.textContent = "";
    for (const el of general.querySelectorAll(".error")) { el.textContent = ""; el.parentElement.classList.remove("invalid"); }
  };
  // Server field paths to form fields: schedule.cron/every/at are the value
  // field, payload paths the payload editor's own fields. A refusal shows
  // the API's code and field under its message.
  const showError = (path, message, code) => {
    const name = /^schedule\.(cron|every|at|after(\[\d+\])?|within)$/.test(path) ? "schedule.value" : path;
    const target = errors[name] || (/^payload(\.|\[|$)/.test(path) ? payloadErrorAt(editor, path) : null);
    if (mode === "form" && target) {
      target.replaceChildren(message, code ? h("span", { class: "code", text: ` ${code} · ${path}` }) : "");
      target.parentElement.classList.add("invalid");
    } else if (mode === "json") {
      jsonError.textContent += (path ? path + ": " : "") + message + " ";
    } else {
      topError.textContent += (path ? path + ": " : "") + message + " ";
    }
  };
  let timer = null;
  const refreshPreview = () => {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      let candidate;
      try { candidate = current(); } catch (e) { return; }
      if (!candidate || !candidate.schedule) return;
      if (candidate.schedule.after) { preview.replaceChildren(h("h2", { text: "Preview" }), h("p", { class: "muted", text: "A fan-in has no instants: it fires once every job it waits for has succeeded." })); return; }
      const p = await api("POST", "/api/v1/preview", previewRequest(candidate, 5));
      const tz = candidate.schedule.tz || "UTC";
      if (p.ok) {
        if (errors["schedule.value"]) { errors["schedule.value"].textContent = ""; errors["schedule.value"].parentElement.classList.remove("invalid"); }
        preview.replaceChildren(h("h2", { text: "Preview" }), instantsTable(p.data.times, tz, p.data.marks));
      } else {
        preview.replaceChildren(h("h2", { text: "Preview" }), h("p", { class: "muted", text: "No preview: fix the schedule." }));
        const details = p.error.details && p.error.details.length ? p.error.details : [p.error];
        for (const d of details) showError((d.field || "").replace(/^schedule$/, "schedule.value"), d.message);
      }
    }, 250);
  };
  for (const name of ["schedule.kind", "schedule.value", "schedule.tz"]) fields[name].addEventListener("input", refreshPreview);
  fields.handler.addEventListener("input", switchPayload);
  json.addEventListener("input", refreshPreview);
  const formTab = h("button", { type: "button", role: "tab", "aria-selected": "true", id: "tab-form", text: "Form" });
  const jsonTab = h("button", { type: "button", role: "tab", "aria-selected": "false", id: "tab-json", text: "JSON" });
  const switchTo = (next) => {
    clearErrors();
    try {
      if (next === "json" && mode === "form") json.value = JSON.stringify(fromForm(), null, 2);
      if (next === "form" && mode === "json") { const parsed = JSON.parse(json.value); jobForm(Object.assign({}, existing || {}, parsed)); return; }
    } catch (e) { topError.textContent = e.message; return; }
    mode = next;
    general.hidden = next !== "form";
    jsonPane.hidden = next !== "json";
    formTab.setAttribute("aria-selected", String(next === "form"));
    jsonTab.setAttribute("aria-selected", String(next === "json"));
  };
  formTab.addEventListener("click", () => switchTo("form"));
  jsonTab.addEventListener("click", () => switchTo("json"));
  const save = async (e) => {
    e.preventDefault();
    clearErrors();
    let body;
    try { body = current(); } catch (err) { showError(err.field, err.message); return; }
    if (!body.id) { showError("id", "is required"); return; }
    const r = await api("PUT", "/api/v1/jobs/" + encodeURIComponent(body.id), body);
    if (!r.ok) {
      for (const d of problems(r.error)) showError(d.field, d.message, d.code);
      flash("Not saved: " + r.error.message, true);
      return;
    }
    flashNext(`Saved ${r.data.job.id} (version ${r.data.job.version}).`, false, r.data.warnings);
    location.hash = "#/jobs/" + encodeURIComponent(r.data.job.id);
  };
  render(h("h1", { text: existing ? "Edit " + existing.id : "New job" }),
    h("div", { class: "tabs", role: "tablist" }, formTab, jsonTab),
    h("form", { id: "job-form", class: "panel", onsubmit: save, novalidate: true },
      general, jsonPane, topError,
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "job-save", disabled: !mayDo("admin"), text: "Save" }),
        existing ? h("a", { class: "button", href: "#/jobs/" + encodeURIComponent(existing.id), text: "Cancel" }) : null)),
    preview);
  refreshPreview();
}

async function editPage(id) {
  const r = await api("GET", "/api/v1/jobs/" + encodeURIComponent(id));
  if (!r.ok) { render(h("p", { class: "error", text: r.error.message })); return; }
  jobForm(r.data.job);
}

async function workersPage() {
  const paint = async () => {
    const r = await api("GET", "/api/v1/workers");
    if (!r.ok) { render(h("h1", { text: "Workers" }), h("p", { class: "error", text: r.error.message })); return; }
    const now = Date.now();
    const age = (t) => t ? Math.max(0, Math.round((now - new Date(t)) / 1000)) + " s" : "–";
    render(h("h1", { text: "Workers" }), table(["id", "group", "threads", "in flight", "heartbeat age", "up for", "version"],
      r.data.workers.map((w) => h("tr", {}, h("td", { text: w.id }), h("td", { text: w.group }), h("td", { text: w.threads }),
        h("td", { text: w.in_flight }), h("td", { text: age(w.heartbeat_at) }), h("td", { text: age(w.started_at) }),
        h("td", { text: w.version }))), "workers"),
    h("p", { class: "muted", text: "Workers that stopped heartbeating drop off this list." }));
    eventListeners.add(() => { if (location.hash === "#/workers") paint(); });
  };
  paint();
}

async function alertsPage() {
  const r = await api("GET", "/api/v1/alerts?limit=100");
  if (!r.ok) { render(h("h1", { text: "Alerts" }), h("p", { class: "error", text: r.error.message })); return; }
  render(h("h1", { text: "Alerts" }), table(["at (UTC)", "kind", "job", "firing", "message"],
    r.data.alerts.map((a) => h("tr", {}, h("td", { text: fmtTime(a.at) }), h("td", {}, stateBadge(a.kind)),
      h("td", {}, a.job_id ? h("a", { href: "#/jobs/" + encodeURIComponent(a.job_id), text: a.job_id }) : ""),
      h("td", { text: a.firing_id || "" }), h("td", { text: a.message }))), "alerts"));
}

async function auditPage() {
  const r = await api("GET", "/api/v1/audit?limit=100");
  if (!r.ok) { render(h("h1", { text: "Audit trail" }), h("p", { class: "error", text: r.error.message })); return; }
  render(h("h1", { text: "Audit trail" }), table(["at (UTC)", "who", "via", "verb", "target", "version", "outcome"],
    r.data.entries.map((e) => h("tr", {}, h("td", { text: fmtTime(e.at) }), h("td", { text: e.actor }), h("td", { text: e.via }),
      h("td", { text: e.verb }), h("td", { text: e.target }),
      h("td", { text: `${e.before_version ?? "–"} → ${e.after_version ?? "–"}` }),
      h("td", {}, e.outcome === "ok" ? stateBadge("succeeded") : h("span", { class: "error", text: e.outcome + ": " + (e.message || "") })))), "audit"));
}

async function calendarsPage() {
  const r = await api("GET", "/api/v1/calendars");
  if (!r.ok) { render(h("h1", { text: "Calendars" }), h("p", { class: "error", text: r.error.message })); return; }
  const canAdmin = mayDo("admin");
  const remove = async (id) => {
    if (!confirm(`Delete calendar ${id}?`)) return;
    const result = await api("DELETE", "/api/v1/calendars/" + encodeURIComponent(id));
    flash(result.ok ? `Deleted ${id}.` : result.error.message, !result.ok);
    if (result.ok) calendarsPage();
  };
  const rows = r.data.calendars.map((c) => h("tr", {}, h("td", { text: c.id }),
    h("td", { text: (c.weekdays || []).join(", ") || "–" }),
    h("td", { text: c.dates.length ? `${c.dates.length}: ${c.dates.slice(0, 6).join(", ")}${c.dates.length > 6 ? ", …" : ""}` : "–" }),
    h("td", {}, h("button", { type: "button", onclick: () => edit(c), disabled: !canAdmin, text: "Edit" }), " ",
      h("button", { type: "button", class: "danger", onclick: () => remove(c.id), disabled: !canAdmin, text: "Delete" }))));
  const id = h("input", { id: "calendar-id", required: true });
  const dates = h("textarea", { id: "calendar-dates", rows: 4, placeholder: "2026-12-24 2026-12-31" });
  const weekdays = h("input", { id: "calendar-weekdays", placeholder: "SAT,SUN" });
  const error = h("div", { class: "error", id: "calendar-error", role: "alert" });
  const edit = (c) => {
    id.value = c.id;
    dates.value = c.dates.join("\n");
    weekdays.value = (c.weekdays || []).join(",");
    id.focus();
  };
  const save = async (e) => {
    e.preventDefault();
    error.textContent = "";
    const body = {
      dates: dates.value.split(/[\s,]+/).filter(Boolean),
      weekdays: weekdays.value.split(/[\s,]+/).filter(Boolean).map((d) => d.toUpperCase()),
    };
    const result = await api("PUT", "/api/v1/calendars/" + encodeURIComponent(id.value.trim()), body);
    if (!result.ok) {
      const details = result.error.details && result.error.details.length ? result.error.details : [result.error];
      error.textContent = details.map((d) => (d.field ? d.field + ": " : "") + d.message).join("; ");
      return;
    }
    flash(`Saved calendar ${result.data.calendar.id}.`);
    calendarsPage();
  };
  render(h("h1", { text: "Calendars" }),
    h("p", { class: "muted", text: "A job's exclude list names calendars: its instants on these local dates are recorded skipped." }),
    table(["id", "weekdays", "dates", ""], rows, "calendars"),
    h("h2", { text: "Create or replace" }),
    h("form", { class: "panel form", id: "calendar-form", onsubmit: save },
      h("div", { class: "field" }, h("label", { for: "calendar-id", text: "Id" }), id),
      h("div", { class: "field" }, h("label", { for: "calendar-weekdays", text: "Weekdays" }), weekdays),
      h("div", { class: "field wide" }, h("label", { for: "calendar-dates", text: "Dates (YYYY-MM-DD, separated by spaces, commas or lines)" }), dates),
      error,
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "calendar-save", disabled: !canAdmin, text: "Save" }))));
}

async function groupsPage() {
  const r = await api("GET", "/api/v1/groups");
  if (!r.ok) { render(h("h1", { text: "Groups" }), h("p", { class: "error", text: r.error.message })); return; }
  const canAdmin = mayDo("admin");
  const limit = (n) => (n === undefined || n === null ? "–" : String(n));
  const name = h("input", { id: "group-name", required: true });
  const concurrent = h("input", { id: "group-max-concurrent", inputmode: "numeric", placeholder: "no limit" });
  const perSecond = h("input", { id: "group-max-per-second", inputmode: "numeric", placeholder: "no limit" });
  const error = h("div", { class: "error", id: "group-error", role: "alert" });
  const edit = (g) => {
    name.value = g.name;
    concurrent.value = g.max_concurrent ?? "";
    perSecond.value = g.max_per_second ?? "";
    name.focus();
  };
  const rows = r.data.groups.map((g) => h("tr", {}, h("td", { text: g.name }),
    h("td", { text: limit(g.max_concurrent) }), h("td", { text: limit(g.max_per_second) }),
    h("td", { text: String(g.running) }), h("td", { text: String(g.held) }),
    h("td", {}, h("button", { type: "button", onclick: () => edit(g), disabled: !canAdmin, text: "Edit" }))));
  const save = async (e) => {
    e.preventDefault();
    error.textContent = "";
    // An empty field removes that limit; the server checks the ranges.
    const body = {};
    const number = (text) => (/^\d+$/.test(text) ? Number(text) : text);
    if (concurrent.value.trim()) body.max_concurrent = number(concurrent.value.trim());
    if (perSecond.value.trim()) body.max_per_second = number(perSecond.value.trim());
    const result = await api("PUT", "/api/v1/groups/" + encodeURIComponent(name.value.trim()), body);
    if (!result.ok) {
      const details = result.error.details && result.error.details.length ? result.error.details : [result.error];
      error.textContent = details.map((d) => (d.field ? d.field + ": " : "") + d.message).join("; ");
      return;
    }
    flash(`Saved the limits of group ${result.data.group.name}.`);
    groupsPage();
  };
  render(h("h1", { text: "Groups" }),
    h("p", { class: "muted", text: "Limits for all firings of a group together, on every replica and worker: a firing over a limit waits (held) and starts when a slot frees." }),
    table(["group", "max concurrent", "max per second", "running", "held", ""], rows, "groups"),
    h("h2", { text: "Set limits" }),
    h("form", { class: "panel form", id: "group-form", onsubmit: save },
      h("div", { class: "field" }, h("label", { for: "group-name", text: "Group" }), name),
      h("div", { class: "field" }, h("label", { for: "group-max-concurrent", text: "Max concurrent (empty: none)" }), concurrent),
      h("div", { class: "field" }, h("label", { for: "group-max-per-second", text: "Max per second (empty: none)" }), perSecond),
      error,
      h("div", { class: "actions" }, h("button", { type: "submit", class: "primary", id: "group-save", disabled: !canAdmin, text: "Save" }))));
}

// ---- Routing -----------------------------------------------------------------

function route() {
  if (!session.user) return;
  flash(...(nextFlash || [""]));
  nextFlash = null;
  const hash = location.hash || "#/";
  const [path, query] = hash.slice(1).split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  for (const link of document.querySelectorAll("#nav a")) {
    const target = link.getAttribute("href").slice(1);
    const current = target === "/" ? path === "/" || path === "" : path.startsWith(target);
    if (current) link.setAttribute("aria-current", "page"); else link.removeAttribute("aria-current");
  }
  if (parts.length === 0) overviewPage();
  else if (parts[0] === "jobs" && parts.length === 1) jobsPage(query || "");
  else if (parts[0] === "jobs" && parts[2] === "edit") editPage(parts[1]);
  else if (parts[0] === "jobs") jobPage(parts[1]);
  else if (parts[0] === "firings" && parts[1]) firingPage(parts[1]);
  else if (parts[0] === "new") jobForm(null);
  else if (parts[0] === "workers") workersPage();
  else if (parts[0] === "alerts") alertsPage();
  else if (parts[0] === "audit") auditPage();
  else if (parts[0] === "calendars") calendarsPage();
  else if (parts[0] === "groups") groupsPage();
  else render(h("h1", { text: "Not found" }), h("a", { href: "#/", text: "Overview" }));
  document.getElementById("view").focus({ preventScroll: true });
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("logout").addEventListener("click", logout);
  const r = await api("GET", "/api/v1/session");
  if (r.ok) { Object.assign(session, r.data); signedIn(); }
  else if (r.status === 401 && /open mode/.test(r.error.message)) render(h("div", { class: "panel login" },
    h("h1", { text: "Open the console through its link" }),
    h("p", { id: "open-mode", text: r.error.message })));
  else showLogin("");
});
