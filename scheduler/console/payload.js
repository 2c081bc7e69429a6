// The job form's payload, edited in the shape its handler reads: a shell
// job's argv as a list, an http job's method, URL, headers and body, any
// other handler's payload as raw JSON. The rules are not repeated here:
// the API checks a payload at put (common/src/payloads/), and a refusal
// names the field (`payload.url`, `payload.argv[2]`, `payload.headers.X-Key`),
// which the form shows next to that field.
"use strict";

const HTTP_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

// A list of rows with add and remove buttons; `row(value, index)` makes
// one row's controls and returns `{ node, read, path }`.
function rowList(id, label, values, blank, row) {
  const rows = [];
  const list = h("div", { class: "rows", id });
  const add = (value) => {
    const r = row(value, rows.length);
    const remove = h("button", { type: "button", class: "link", "aria-label": "remove " + label + " " + (rows.length + 1), text: "remove" });
    const node = h("div", { class: "row" }, r.node, remove);
    const entry = Object.assign({}, r, { node });
    remove.addEventListener("click", () => { rows.splice(rows.indexOf(entry), 1); node.remove(); });
    rows.push(entry);
    list.append(node);
    return entry;
  };
  for (const v of values) add(v);
  const more = h("button", { type: "button", id: id + "-add", text: "Add " + label, onclick: () => { const e = add(blank); e.focus(); } });
  return { node: h("div", {}, list, more), rows };
}

// The payload editor for `handler`, starting from `payload`. Returns
// `{ node, read(), errors }`: `read()` gives the payload (throwing
// `{ field, message }` when raw JSON does not parse) and `errors` maps a
// field path to the element that shows its error.
function payloadEditor(handler, payload) {
  if (handler === "shell") return shellPayload(payload || {});
  if (handler === "http") return httpPayload(payload || {});
  return rawPayload(payload);
}

// An error line for `path`, registered in `errors`.
function errorLine(errors, path) {
  const el = h("div", { class: "error", "data-error-for": path, id: "error-" + path.replace(/[^A-Za-z0-9_-]/g, "_") });
  errors[path] = el;
  return el;
}

function shellPayload(p) {
  const errors = {};
  const argvItems = Array.isArray(p.argv) && p.argv.length ? p.argv : [""];
  const argv = rowList("payload-argv", "argument", argvItems, "", (value, i) => {
    const input = h("input", { value: String(value), "aria-label": `argv[${i}]`, class: "argv" });
    const error = errorLine(errors, `payload.argv[${i}]`);
    return { node: h("div", { class: "grow" }, input, error), read: () => input.value, focus: () => input.focus() };
  });
  const cwd = h("input", { id: "payload-cwd", value: p.cwd || "", placeholder: "the worker's own" });
  const node = h("div", { class: "field wide payload", "data-field": "payload" },
    h("div", { class: "label", text: "Command: the program, then one argument per line (no shell: use sh, -c, … for a command line)" }),
    argv.node, errorLine(errors, "payload.argv"),
    h("label", { for: "payload-cwd", text: "Working directory (optional)" }), cwd, errorLine(errors, "payload.cwd"),
    p.env ? h("p", { class: "muted", text: `Environment: ${Object.keys(p.env).join(", ")} (edit in the JSON tab)` }) : null,
    errorLine(errors, "payload.env"), errorLine(errors, "payload"));
  const read = () => {
    const out = Object.assign({}, p, { argv: argv.rows.map((r) => r.read()) });
    if (cwd.value.trim()) out.cwd = cwd.value.trim(); else delete out.cwd;
    return out;
  };
  return { node, read, errors };
}

function httpPayload(p) {
  const errors = {};
  const method = h("select", { id: "payload-method" },
    [...new Set([...HTTP_METHODS, (p.method || "GET").toUpperCase()])].map((m) =>
      h("option", { value: m, text: m, selected: m === (p.method || "GET").toUpperCase() })));
  const url = h("input", { id: "payload-url", value: p.url || "", placeholder: "https://example.com/hook", inputmode: "url" });
  const headerEntries = Object.entries(p.headers || {});
  const headers = rowList("payload-headers", "header", headerEntries, ["", ""], ([name, value], i) => {
    const n = h("input", { value: name, "aria-label": `header ${i + 1} name`, placeholder: "X-Api-Key", class: "header-name" });
    const v = h("input", { value, "aria-label": `header ${i + 1} value`, class: "header-value" });
    const error = h("div", { class: "error" });
    // The API names a bad header by its name: `payload.headers.<name>`.
    return { node: h("div", { class: "grow pair" }, n, v, error), read: () => [n.value.trim(), v.value], focus: () => n.focus(), error };
  });
  const hasBody = p.body !== undefined && p.body !== null;
  const bodyKind = h("select", { id: "payload-body-kind" },
    ["text", "JSON"].map((k) => h("option", { value: k, text: k, selected: (typeof p.body === "string" ? "text" : hasBody ? "JSON" : "text") === k })));
  const body = h("textarea", { id: "payload-body", rows: 3, text: !hasBody ? "" : typeof p.body === "string" ? p.body : JSON.stringify(p.body, null, 2) });
  const node = h("div", { class: "field wide payload form", "data-field": "payload" },
    h("div", {}, h("label", { for: "payload-method", text: "Method" }), method, errorLine(errors, "payload.method")),
    h("div", { class: "wide" }, h("label", { for: "payload-url", text: "URL" }), url, errorLine(errors, "payload.url")),
    h("div", { class: "wide" }, h("div", { class: "label", text: "Headers" }), headers.node, errorLine(errors, "payload.headers")),
    h("div", {}, h("label", { for: "payload-body-kind", text: "Body is" }), bodyKind),
    h("div", { class: "wide" }, h("label", { for: "payload-body", text: "Body (empty: none)" }), body, errorLine(errors, "payload.body")),
    errorLine(errors, "payload"));
  // Header errors are found by name when they arrive.
  const headerError = (name) => { const r = headers.rows.find((x) => x.read()[0] === name); return r ? r.error : null; };
  const read = () => {
    const out = { url: url.value.trim(), method: method.value };
    const named = headers.rows.map((r) => r.read()).filter(([n]) => n);
    if (named.length) out.headers = Object.fromEntries(named);
    if (body.value !== "") {
      if (bodyKind.value === "JSON") {
        try { out.body = JSON.parse(body.value); } catch (e) { throw { field: "payload.body", message: "is not valid JSON: " + e.message }; }
      } else out.body = body.value;
    }
    return out;
  };
  return { node, read, errors, headerError };
}

function rawPayload(payload) {
  const errors = {};
  const text = h("textarea", { id: "field-payload", rows: 4, text: JSON.stringify(payload === undefined ? null : payload, null, 2) });
  const node = h("div", { class: "field wide", "data-field": "payload" },
    h("label", { for: "field-payload", text: "Payload (JSON, read by the handler)" }), text, errorLine(errors, "payload"));
  const read = () => {
    try { return JSON.parse(text.value || "null"); } catch (e) { throw { field: "payload", message: "is not valid JSON: " + e.message }; }
  };
  return { node, read, errors };
}

// The element that shows the error at `path` in `editor`: the field
// itself, or the nearest enclosing one the editor has (`payload.env.FOO`
// shows at `payload.env`, an unknown key at `payload`).
function payloadErrorAt(editor, path) {
  const header = /^payload\.headers\.(.+)$/.exec(path);
  if (header && editor.headerError) { const el = editor.headerError(header[1]); if (el) return el; }
  let p = path;
  while (p) {
    if (editor.errors[p]) return editor.errors[p];
    const cut = Math.max(p.lastIndexOf("."), p.lastIndexOf("["));
    p = cut > 0 ? p.slice(0, cut) : "";
  }
  return null;
}
