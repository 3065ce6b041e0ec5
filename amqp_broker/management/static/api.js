// The management API as the page calls it: HTTP basic auth on every request, JSON in and out.
// Every action of the page goes through these endpoints (the ones RabbitMQ's management UI and
// rabbitmqadmin use). credentials "omit": see login() in app.js.
export const state = {auth: sessionStorage.getItem("auth")};

export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.reason ? `${status}: ${body.reason}` : `HTTP ${status}`);
    this.status = status;
  }
}

export async function api(path, method = "GET", body = undefined) {
  const headers = {"Authorization": "Basic " + state.auth};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch("/api" + path, {method, headers, credentials: "omit",
    cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body)});
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

export const enc = encodeURIComponent;

export function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
    '"': "&quot;", "'": "&#39;"}[c]));
}

export function $(id) { return document.getElementById(id); }

export function table(id, head, rows) {
  return `<table id="${id}"><thead><tr>${head.map(h => `<th>${esc(h)}</th>`).join("")}</tr>` +
    `</thead><tbody>${rows.length ? rows.join("") :
    `<tr><td colspan="${head.length}" class="muted">none</td></tr>`}</tbody></table>`;
}

export function num(value) { return `<td class="num">${esc(value)}</td>`; }

export function rate(details) { return (details && details.rate !== undefined) ?
  `${details.rate.toFixed(1)}/s` : ""; }

export function features(item) {
  const f = [];
  if (item.durable) f.push("D");
  if (item.auto_delete) f.push("AD");
  if (item.exclusive) f.push("Excl");
  if (item.internal) f.push("I");
  if (item.arguments && Object.keys(item.arguments).length) f.push("Args");
  return f.join(" ");
}

// A form's fields by name (checkboxes as booleans).
export function fields(form) {
  const out = {};
  for (const el of form.elements) {
    if (!el.name) continue;
    out[el.name] = el.type === "checkbox" ? el.checked : el.value;
  }
  return out;
}

// Run an action from a form or button and show its outcome in the element #<id>-result.
export async function act(resultId, fn) {
  const out = $(resultId);
  try {
    const said = await fn();
    if (out) { out.className = "ok"; out.textContent = said || "Done."; }
    return true;
  } catch (e) {
    if (out) { out.className = "error"; out.textContent = e.message; }
    return false;
  }
}

export function parseJSON(text, fallback) {
  if (!text || !text.trim()) return fallback;
  return JSON.parse(text);
}
