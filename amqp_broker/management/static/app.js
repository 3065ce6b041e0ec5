// amqp-broker management page: logs in with HTTP basic auth, shows RabbitMQ's tabs (Overview,
// Connections, Channels, Exchanges, Queues and Streams, Admin) and a page per queue, exchange and
// connection, and polls the management API every 2 s. Vanilla JS modules, no build step.
//
// The API answers a wrong password as RabbitMQ does: 401 with a "WWW-Authenticate: Basic"
// challenge. A request whose credentials mode includes credentials would then wait for the
// browser's own password dialog (the Fetch standard's 401 handling; in headless Chromium it never
// returns) and the browser may keep the password typed there. With credentials "omit" (api.js)
// the browser neither prompts nor adds a remembered password: our Authorization header is the
// only one, the 401 comes back to us, and we say "Login failed" as RabbitMQ's management UI does.
import {api, state, $} from "./api.js";
import {overview} from "./overview.js";
import {channels, connections, exchanges, queues} from "./lists.js";
import {connection, exchange, queue} from "./objects.js";
import {admin} from "./admin.js";

const POLL_MS = 2000;
// "#/queues/%2F/q" -> the queue page of vhost "/", queue "q"
const ROUTES = {"": overview, connections, channels, exchanges, queues, admin};
const PAGES = {connections: connection, exchanges: exchange, queues: queue};
let timer = null, refresh = null, shown = null;

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(p => p !== "")
    .map(decodeURIComponent);
  const [tab, ...rest] = parts;
  const view = rest.length ? PAGES[tab] : ROUTES[tab ?? ""];
  document.querySelectorAll("nav a").forEach(a =>
    a.classList.toggle("active", a.dataset.tab === (tab ?? "")));
  const el = $("view");
  if (!view) { el.innerHTML = "<p>Not found.</p>"; refresh = null; return; }
  shown = location.hash;
  refresh = view(el, rest);
  poll();
}

async function poll() {
  if (!refresh) return;
  const mine = shown;
  try {
    await refresh();
    if (mine === shown) $("status").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    if (e.status === 401) { logout("Login failed"); return; }
    $("status").textContent = "error: " + e.message;
  }
}

function start() {
  $("login-box").hidden = true; $("main").hidden = false; $("logout").hidden = false;
  $("who").textContent = "user " + new TextDecoder().decode(
    Uint8Array.from(atob(state.auth), c => c.charCodeAt(0))).split(":")[0];
  api("/overview").then(o => { $("node").textContent =
    `${o.node} (${o.product_name} ${o.product_version})`; }).catch(() => {});
  route();
  clearInterval(timer);
  timer = setInterval(poll, POLL_MS);
}

function logout(message) {
  clearInterval(timer); sessionStorage.removeItem("auth"); state.auth = null; refresh = null;
  $("login-box").hidden = false; $("main").hidden = true; $("logout").hidden = true;
  $("who").textContent = ""; $("login-error").textContent = message || "";
}

$("login").addEventListener("submit", async event => {
  event.preventDefault();
  const text = $("username").value + ":" + $("password").value;
  state.auth = btoa(String.fromCharCode(...new TextEncoder().encode(text)));
  try {
    await api("/whoami");
    sessionStorage.setItem("auth", state.auth);
    $("login-error").textContent = "";
    start();
  } catch (e) {
    logout(e.status === 401 ? "Login failed" : "Cannot log in: " + e.message);
  }
});
$("logout").addEventListener("click", () => logout(""));
window.addEventListener("hashchange", () => { if (state.auth && !$("main").hidden) route(); });
if (state.auth) start();
