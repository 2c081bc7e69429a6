// Times typed into the console's backfill and pause forms, read as
// chimectl reads its time flags (chimectl/src/when.rs): an RFC 3339
// instant, `now`, or an offset from now (`-3h`, `+30m`, `in 30m`,
// `+1h30m`). The API itself takes RFC 3339 only, so the console resolves
// an offset before it sends, against one `now` per submission, and shows
// the result while the user types. Durations follow humantime, the parser
// behind chimectl's offsets: a number and a unit, repeated.
"use strict";

const WHEN_HELP = "RFC 3339 (2026-03-28T02:30:00Z), now, or an offset from now: -3h, +30m, in 30m, -2d";

// Seconds per unit, as humantime counts them (a month is 30.44 days, a
// year 365.25 days). Units are case-sensitive: `M` is a month, `m` a minute.
const WHEN_UNITS = (() => {
  const table = {};
  const add = (names, seconds) => { for (const n of names) table[n] = seconds; };
  add(["nanos", "nsec", "ns"], 1e-9);
  add(["usec", "us", "µs"], 1e-6);
  add(["millis", "msec", "ms"], 1e-3);
  add(["seconds", "second", "secs", "sec", "s"], 1);
  add(["minutes", "minute", "min", "mins", "m"], 60);
  add(["hours", "hour", "hr", "hrs", "h"], 3600);
  add(["days", "day", "d"], 86400);
  add(["weeks", "week", "wk", "wks", "w"], 604800);
  add(["months", "month", "M"], 2630016);
  add(["years", "year", "yr", "yrs", "y"], 31557600);
  return table;
})();

// The largest offset taken, as chimectl: a century.
const WHEN_MAX_SECONDS = 36525 * 86400;

// RFC 3339 with a zone (`Z` or `±hh:mm`), optional fractional seconds;
// `T`, `t` or a space between date and time.
const RFC3339 = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/;

// A humantime duration in milliseconds, or an error message.
function whenDuration(text) {
  const span = /\s*(\d+(?:\.\d+)?)\s*([A-Za-zµ]+)\s*/y;
  let total = 0, at = 0;
  if (!text.trim()) return { error: "value was empty" };
  while (at < text.length) {
    span.lastIndex = at;
    const m = span.exec(text);
    if (!m) return { error: `expected a number and a unit at ${at}` };
    const unit = WHEN_UNITS[m[2]];
    if (unit === undefined) return { error: `unknown time unit "${m[2]}", supported units: ns, us, ms, s, m, h, d, w, M, y` };
    total += Number(m[1]) * unit;
    at = span.lastIndex;
  }
  return { seconds: total };
}

// Reads what the user typed: `{ at: Date }` resolved against `now` (a
// Date), or `{ error }` saying what is taken.
function parseWhen(text, now) {
  const t = (text || "").trim();
  if (t.toLowerCase() === "now") return { at: new Date(now.getTime()) };
  let sign = 0, rest = "";
  if (t.startsWith("+") || t.startsWith("-")) { sign = t[0] === "+" ? 1 : -1; rest = t.slice(1); }
  else if (/^in\s/i.test(t)) { sign = 1; rest = t.slice(3); }
  if (!sign) {
    const at = RFC3339.test(t) ? new Date(t.replace(" ", "T")) : null;
    if (at && !isNaN(at)) return { at };
    return { error: `"${t}" is not a time: write ${WHEN_HELP} (an offset needs its sign: +30m, -30m)` };
  }
  const d = whenDuration(rest.trim());
  if (d.error) return { error: `"${t}" is not an offset from now (${d.error}); write e.g. -3h, +30m or -2d` };
  if (d.seconds > WHEN_MAX_SECONDS) return { error: `"${t}" is more than a century from now` };
  return { at: new Date(now.getTime() + sign * Math.round(d.seconds * 1000)) };
}

// A text field for a time with its resolved instant shown beside it (UTC
// and the browser's zone), updated as the user types. `resolve(now)` gives
// `{ at }`, `{ error }`, or `{}` when the field is empty.
function whenField(id, label, placeholder) {
  const input = h("input", { id, name: id, placeholder, autocomplete: "off", size: 22, "aria-describedby": id + "-resolved" });
  const out = h("output", { id: id + "-resolved", class: "resolved", for: id, "aria-live": "polite" });
  const resolve = (now) => input.value.trim() ? parseWhen(input.value, now || new Date()) : {};
  const show = () => {
    const r = resolve(new Date());
    out.classList.toggle("error", Boolean(r.error));
    out.textContent = r.error ? r.error : r.at ? `= ${fmtTime(r.at.toISOString())} UTC (${r.at.toLocaleString()} your time)` : "";
  };
  input.addEventListener("input", show);
  const field = h("div", { class: "when" }, h("label", { for: id, text: label }), input, out);
  return { field, input, resolve, show };
}
