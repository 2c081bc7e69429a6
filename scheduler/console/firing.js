// One firing: its state as the history shows it (with the limit that
// holds it back, if one does), and its own page with everything
// `firings.get` returns, the whole stored output and error included.
"use strict";

// What history cells show of an output or error: its first lines.
const EXCERPT_CHARS = 300;

function excerpt(text) {
  return text.length > EXCERPT_CHARS ? text.slice(0, EXCERPT_CHARS) + " …" : text;
}

function firingHref(id) {
  return "#/firings/" + encodeURIComponent(id);
}

// The state badge; a firing a concurrency limit holds back says which
// (the setting to raise) and since when.
function firingState(x) {
  if (!x.held_by) return stateBadge(x.state);
  return h("span", {}, stateBadge(x.state), " ",
    h("span", { class: "held", title: "waiting for a slot: raise this limit to start it sooner",
      text: `held by ${x.held_by} since ${fmtTime(x.held_since)} UTC` }));
}

async function firingPage(id) {
  const r = await api("GET", "/api/v1/firings/" + encodeURIComponent(id));
  if (!r.ok) { render(h("h1", { text: id }), h("p", { class: "error", role: "alert", text: r.error.message })); return; }
  const x = r.data.firing;
  const row = (label, value) => (value === undefined || value === null || value === "")
    ? null : h("tr", {}, h("th", { scope: "row", text: label }), h("td", {}, value));
  const time = (t) => t ? fmtTime(t) + " UTC" : null;
  const cancellable = ["staged", "published", "executing"].includes(x.state) && mayDo("operator");
  const cancel = async () => {
    const result = await api("POST", `/api/v1/firings/${encodeURIComponent(id)}/cancel`, {});
    flash(result.ok ? `Cancelling ${id}.` : result.error.message, !result.ok);
    if (result.ok) firingPage(id);
  };
  render(
    h("h1", {}, "Firing ", h("code", { text: x.id }), " ", stateBadge(x.state)),
    h("p", {}, h("a", { href: "#/jobs/" + encodeURIComponent(x.job_id), text: "← job " + x.job_id })),
    cancellable ? h("div", { class: "actions" }, h("button", { type: "button", class: "danger", id: "firing-cancel", onclick: cancel, text: "Cancel" })) : null,
    h("div", { class: "table-wrap" }, h("table", { id: "firing", class: "facts" }, h("tbody", {},
      row("state", firingState(x)),
      row("attempt", String(x.attempt) + (x.backfill ? " (backfill)" : "")),
      row("shard", x.shard === undefined || x.shard === null ? null : String(x.shard)),
      row("group", x.group), row("priority", String(x.priority)),
      row("worker", x.worker),
      row("addressed to", x.worker_id),
      row("scheduled", time(x.scheduled_at)), row("due", time(x.due_at)),
      row("published", time(x.published_at)), row("started", time(x.started_at)),
      row("finished", time(x.finished_at)),
      row("ran for", duration(x.started_at, x.finished_at))))),
    h("h2", { text: "Error" }),
    x.error ? h("pre", { id: "firing-error", class: "error", text: x.error }) : h("p", { class: "muted", text: "None." }),
    h("h2", { text: "Output" }),
    x.output ? h("pre", { id: "firing-output", class: "output", text: x.output }) : h("p", { class: "muted", text: "None." }),
    h("p", { class: "muted", text: "Chime keeps the last 64 KiB of a firing's output and the first 8 KiB of its error: this is all that is stored." }));
}
