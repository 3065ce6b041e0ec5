// amqp-broker management page: logs in with HTTP basic auth and polls the management API
// (the same endpoints rabbitmqadmin uses) every 2 s. No framework, no build step.
"use strict";

const POLL_MS = 2000;
const HISTORY = 150;               // chart points kept (5 minutes at 2 s)
const SERIES = [["publish", "#2a7ab0", "Publish"], ["deliver_get", "#3a9a4a", "Deliver / get"],
                ["ack", "#c07a1a", "Ack"], ["confirm", "#8a4ab0", "Confirm"]];
let auth = sessionStorage.getItem("auth");
let history = [];
let last = null;
let lastQueues = {};                // "vhost/name" -> {at, messages}: per-queue net rate
let timer = null;

function $(id) { return document.getElementById(id); }

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
    '"': "&quot;", "'": "&#39;"}[c]));
}

// The API answers a wrong password as RabbitMQ does: 401 with a "WWW-Authenticate: Basic"
// challenge. A request whose credentials mode includes credentials would then wait for the
// browser's own password dialog (the Fetch standard's 401 handling; in headless Chromium it never
// returns) and the browser may keep the password typed there. With credentials "omit" the browser
// neither prompts nor adds a remembered password: our Authorization header is the only one, the
// 401 comes back to us, and we say "Login failed" as RabbitMQ's management UI does.
async function api(path) {
  const response = await fetch("/api" + path, {
    headers: {"Authorization": "Basic " + auth}, credentials: "omit", cache: "no-store"});
  if (response.status === 401) { throw new Error("unauthorised"); }
  if (!response.ok) { throw new Error(path + ": HTTP " + response.status); }
  return response.json();
}

function fill(tableId, rows) {
  $(tableId).querySelector("tbody").innerHTML = rows.length ? rows.join("") :
    '<tr><td colspan="10" class="muted">none</td></tr>';
}

function num(value) { return '<td class="num">' + esc(value) + "</td>"; }

function features(item) {
  const f = [];
  if (item.durable) f.push("D");
  if (item.auto_delete) f.push("AD");
  if (item.exclusive) f.push("Excl");
  if (item.internal) f.push("I");
  if (item.arguments && Object.keys(item.arguments).length) f.push("Args");
  return f.join(" ");
}

function drawChart() {
  const canvas = $("rates");
  const ctx = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height, pad = 40;
  ctx.clearRect(0, 0, w, h);
  let max = 1;
  for (const point of history) for (const [key] of SERIES) max = Math.max(max, point[key]);
  ctx.strokeStyle = "#ccc"; ctx.fillStyle = "#666"; ctx.font = "11px sans-serif";
  for (let i = 0; i <= 4; i++) {
    const y = h - pad / 2 - (h - pad) * i / 4;
    ctx.beginPath(); ctx.moveTo(pad, y); ctx.lineTo(w - 5, y); ctx.stroke();
    ctx.fillText((max * i / 4).toFixed(max < 10 ? 1 : 0), 2, y + 4);
  }
  for (const [key, color] of SERIES) {
    ctx.strokeStyle = color; ctx.lineWidth = 2; ctx.beginPath();
    history.forEach((point, i) => {
      const x = pad + (w - pad - 5) * i / Math.max(1, HISTORY - 1);
      const y = h - pad / 2 - (h - pad) * point[key] / max;
      if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    });
    ctx.stroke();
  }
  $("legend").innerHTML = SERIES.map(([key, color, label]) => {
    const now = history.length ? history[history.length - 1][key] : 0;
    return `<span><i style="background:${color}"></i>${label}: ${now.toFixed(1)}/s</span>`;
  }).join("");
}

function record(stats) {
  const now = Date.now() / 1000;
  const point = {};
  for (const [key] of SERIES) {
    const total = stats[key] || 0;
    point[key] = last ? Math.max(0, (total - last.stats[key]) / Math.max(0.001, now - last.at)) : 0;
  }
  last = {at: now, stats: Object.fromEntries(SERIES.map(([k]) => [k, stats[k] || 0]))};
  history.push(point);
  if (history.length > HISTORY) history.shift();
  drawChart();
}

async function refresh() {
  try {
    const [overview, queues, conns, channels, exchanges] = await Promise.all([
      api("/overview"), api("/queues"), api("/connections"), api("/channels"),
      api("/exchanges")]);
    let cluster = null;
    try { cluster = await api("/cluster-status"); } catch (e) { cluster = null; }
    $("node").textContent = `${overview.node} (${overview.product_name} ${overview.product_version})`;
    const t = overview.object_totals, q = overview.queue_totals;
    $("totals").innerHTML = [["Connections", t.connections], ["Channels", t.channels],
      ["Exchanges", t.exchanges], ["Queues", t.queues], ["Consumers", t.consumers],
      ["Ready", q.messages_ready], ["Unacked", q.messages_unacknowledged],
      ["Total messages", q.messages]].map(([k, v]) =>
      `<div class="card">${esc(k)}<b>${esc(v)}</b></div>`).join("");
    record(overview.message_stats || {});
    if (cluster) {
      const names = cluster.member_names || [];
      $("cluster").innerHTML = `<p>Cluster <b>${esc(cluster.cluster_name)}</b>, view
        ${esc(cluster.view)}, ${names.length} member(s); leader <b>${esc(cluster.leader)}</b></p>
        <table><thead><tr><th>Member</th><th>Address</th><th>Role</th></tr></thead><tbody>` +
        names.map((n, i) => `<tr><td class="${i ? "" : "leader"}">${esc(n)}</td>
          <td>${esc((cluster.members || [])[i] || "")}</td><td>${i ? "member" : "leader"}</td></tr>`)
          .join("") + "</tbody></table>";
    }
    const at = Date.now() / 1000, seen = {};
    const netRate = x => {
      const key = x.vhost + "/" + x.name, before = lastQueues[key];
      seen[key] = {at, messages: x.messages};
      return before ? (x.messages - before.messages) / Math.max(0.001, at - before.at) : 0;
    };
    fill("queues", queues.map(x => `<tr data-queue="${esc(x.name)}"><td>${esc(x.vhost)}</td>
      <td class="qname">${esc(x.name)}</td><td>${esc(x.type)}</td><td>${features(x)}</td>
      <td>${esc(x.state)}</td>${num(x.messages_ready)}${num(x.messages_unacknowledged)}
      <td class="num qmessages">${esc(x.messages)}</td>${num(x.consumers)}
      ${num(netRate(x).toFixed(1))}` +
      (x.members ? `<td>leader ${esc(x.leader)}; replicas ${esc(x.members.join(", "))}</td>` : "") +
      "</tr>"));
    lastQueues = seen;
    fill("connections", conns.map(x => `<tr><td>${esc(x.name)}</td><td>${esc(x.user)}</td>
      <td>${esc(x.vhost)}</td><td>${esc(x.client_properties?.product ?? "")}</td>
      <td>${esc(x.state)}</td>${num(x.channels)}</tr>`));
    fill("channels", channels.map(x => `<tr><td>${esc(x.name)}</td><td>${esc(x.user)}</td>
      <td>${x.confirm ? "C" : ""}${x.transactional ? "T" : ""}</td>${num(x.prefetch_count)}
      ${num(x.messages_unacknowledged)}${num(x.consumer_count)}${num(x.message_stats.publish)}</tr>`));
    fill("exchanges", exchanges.map(x => `<tr><td>${esc(x.vhost)}</td>
      <td>${esc(x.name || "(AMQP default)")}</td><td>${esc(x.type)}</td><td>${features(x)}</td></tr>`));
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    if (e.message === "unauthorised") { logout("Login failed"); return; }
    $("status").textContent = "error: " + e.message;
  }
}

function start() {
  $("login-box").hidden = true; $("main").hidden = false; $("logout").hidden = false;
  $("who").textContent = "user " + atob(auth).split(":")[0];
  refresh();
  timer = setInterval(refresh, POLL_MS);
}

function logout(message) {
  clearInterval(timer); sessionStorage.removeItem("auth"); auth = null;
  $("login-box").hidden = false; $("main").hidden = true; $("logout").hidden = true;
  $("who").textContent = ""; $("login-error").textContent = message || "";
}

$("login").addEventListener("submit", async event => {
  event.preventDefault();
  auth = btoa($("username").value + ":" + $("password").value);
  try {
    await api("/whoami");
    sessionStorage.setItem("auth", auth);
    $("login-error").textContent = "";
    start();
  } catch (e) {
    logout(e.message === "unauthorised" ? "Login failed" : "Cannot log in: " + e.message);
  }
});
$("logout").addEventListener("click", () => logout(""));
if (auth) start();
