// A page per queue, per exchange and per connection, with RabbitMQ's actions on each: publish,
// get messages (ack mode), purge, delete, add a binding; close a connection.
import {api, act, enc, esc, fields, num, parseJSON, rate, state, table, $} from "./api.js";
import {drawChart, legend} from "./chart.js";
import {CHANNEL_HEAD, channelRows} from "./lists.js";

// RabbitMQ's queue page: net change, and the queue's message_stats rates
const SERIES = [["messages", "#2a7ab0", "Net change"], ["publish", "#3a9a4a", "Incoming"],
  ["deliver_get", "#c07a20", "Deliver / get"], ["ack", "#8a4ab0", "Ack"],
  ["redeliver", "#b03a3a", "Redelivered"]];
// RabbitMQ's exchange page: message rates in (published to it) and out (to its queues)
const X_SERIES = [["publish_in", "#3a9a4a", "Publish (In)"],
  ["publish_out", "#2a7ab0", "Publish (Out)"]];

function bindingRows(list, vhost) {
  return list.map(b => `<tr data-binding="${esc(b.source)}|${esc(b.routing_key)}">
    <td>${esc(b.source || "(AMQP default)")}</td><td>${esc(b.destination_type)}</td>
    <td>${esc(b.destination)}</td><td>${esc(b.routing_key)}</td>
    <td>${esc(JSON.stringify(b.arguments || {}))}</td><td>${b.source ? `<button class="unbind"
    data-path="/bindings/${enc(vhost)}/e/${enc(b.source)}/${b.destination_type[0]}/${enc(b.destination)}/${enc(b.properties_key)}">Unbind</button>` : ""}</td></tr>`);
}

function publishForm(id, withKey = true) {
  return `<form id="${id}">${withKey ? '<label>Routing key <input name="routing_key"></label>' :
    '<span class="muted">To the default exchange, routing key = queue name.</span>'}
    <label>Delivery mode <select name="delivery_mode"><option value="1">1 - non-persistent</option>
      <option value="2">2 - persistent</option></select></label>
    <label>Headers (JSON) <input name="headers" placeholder='{"k": "v"}'></label>
    <label>Payload <textarea name="payload" rows="2"></textarea></label>
    <button>Publish message</button> <span id="${id}-result"></span></form>`;
}

function onPublish(id, vhost, exchange, fixedKey) {
  $(id).onsubmit = e => { e.preventDefault(); const f = fields(e.target);
    act(`${id}-result`, async () => {
      const properties = {delivery_mode: Number(f.delivery_mode)};
      const headers = parseJSON(f.headers, null);
      if (headers) properties.headers = headers;
      const r = await api(`/exchanges/${enc(vhost)}/${enc(exchange)}/publish`, "POST",
        {properties, routing_key: fixedKey ?? f.routing_key, payload: f.payload,
         payload_encoding: "string"});
      return r.routed ? "Message published." : "Message published, but not routed.";
    }); };
}

function onUnbind(el) {
  el.querySelectorAll("button.unbind").forEach(b => { b.onclick = () =>
    act("bindings-result", () => api(b.dataset.path, "DELETE")); });
}

export function queue(el, [vhost, name]) {
  const path = `/queues/${enc(vhost)}/${enc(name)}`;
  const history = [];
  el.innerHTML = `<h2>Queue <span id="qtitle">${esc(name)}</span></h2>
    <p class="muted">Virtual host ${esc(vhost)}</p><div id="qdetails"></div>
    <h3>Message rates (per second)</h3><canvas id="qrates" width="900" height="160"></canvas>
    <div id="qlegend" class="legend"></div>
    <h3>Consumers</h3><div id="qconsumers"></div>
    <h3>Bindings</h3><div id="qbindings"></div><span id="bindings-result"></span>
    <form id="add-binding"><label>From exchange <input name="source" required></label>
      <label>Routing key <input name="routing_key"></label>
      <label>Arguments (JSON) <input name="arguments"></label>
      <button>Bind</button> <span id="add-binding-result"></span></form>
    <h3>Publish message</h3>${publishForm("publish", false)}
    <h3>Get messages</h3>
    <form id="get"><label>Ack mode <select name="ackmode">
      <option value="ack_requeue_true">Nack message requeue true</option>
      <option value="ack_requeue_false">Automatic ack</option>
      <option value="reject_requeue_true">Reject requeue true</option>
      <option value="reject_requeue_false">Reject requeue false</option></select></label>
      <label>Messages <input name="count" value="1" size="4"></label>
      <button>Get Message(s)</button> <span id="get-result"></span></form><div id="got"></div>
    <h3>Purge</h3><button id="purge">Purge Messages</button> <span id="purge-result"></span>
    <h3>Delete</h3><button id="delete">Delete Queue</button> <span id="delete-result"></span>`;
  $("add-binding").onsubmit = e => { e.preventDefault(); const f = fields(e.target);
    act("add-binding-result", () => api(`/bindings/${enc(vhost)}/e/${enc(f.source)}/q/${enc(name)}`,
      "POST", {routing_key: f.routing_key, arguments: parseJSON(f.arguments, {})})); };
  onPublish("publish", vhost, "amq.default", name);
  $("get").onsubmit = e => { e.preventDefault(); const f = fields(e.target);
    act("get-result", async () => {
      const got = await api(path + "/get", "POST", {count: Number(f.count), ackmode: f.ackmode,
        encoding: "auto", truncate: 50000});
      $("got").innerHTML = got.map((m, i) => `<table class="message"><tbody>
        <tr><th>Message ${i + 1}</th><td>The server reported ${esc(m.message_count)} messages remaining.</td></tr>
        <tr><th>Exchange</th><td>${esc(m.exchange || "(AMQP default)")}</td></tr>
        <tr><th>Routing Key</th><td>${esc(m.routing_key)}</td></tr>
        <tr><th>Redelivered</th><td>${m.redelivered}</td></tr>
        <tr><th>Properties</th><td>${esc(JSON.stringify(m.properties))}</td></tr>
        <tr><th>Payload</th><td class="payload">${esc(m.payload)}</td></tr></tbody></table>`).join("");
      return got.length ? `${got.length} message(s).` : "Queue is empty.";
    }); };
  $("purge").onclick = () => act("purge-result", async () => {
    await api(path + "/contents", "DELETE"); return "Queue purged."; });
  $("delete").onclick = () => { if (confirm(`Delete queue ${name}?`))
    act("delete-result", async () => { await api(path, "DELETE"); location.hash = "#/queues";
      return "Queue deleted."; }); };
  return async () => {
    const [q, bindings] = await Promise.all([api(path), api(path + "/bindings")]);
    const s = q.message_stats || {};
    $("qdetails").innerHTML = table("qinfo", ["Type", "Features", "State", "Ready", "Unacked",
      "Total", "Consumers", "Incoming", "Deliver / get", "Ack", "Redelivered", "Net change",
      "Leader", "Replicas"],
      [`<tr><td>${esc(q.type)}</td><td>${q.durable ? "D" : ""}</td><td>${esc(q.state)}</td>
      ${num(q.messages_ready)}${num(q.messages_unacknowledged)}
      <td class="num qmessages">${esc(q.messages)}</td>${num(q.consumers)}
      ${["publish", "deliver_get", "ack", "redeliver"].map(k => num(rate(s[k + "_details"])))
        .join("")}${num(rate(q.messages_details))}
      <td>${esc(q.leader ?? "")}</td><td>${esc((q.members || []).join(", "))}</td></tr>`]);
    history.push(Object.fromEntries(SERIES.map(([k]) => [k, (k === "messages" ?
      q.messages_details : s[k + "_details"])?.rate ?? 0])));
    if (history.length > 150) history.shift();
    drawChart($("qrates"), history, SERIES);
    $("qlegend").innerHTML = legend(SERIES, history[history.length - 1]);
    $("qconsumers").innerHTML = table("consumers", ["Channel", "Consumer tag", "Ack required",
      "Exclusive", "Prefetch"], (q.consumer_details || []).map(c => `<tr>
      <td>${esc(c.channel_details?.name)}</td><td>${esc(c.consumer_tag)}</td>
      <td>${c.ack_required}</td><td>${c.exclusive}</td>${num(c.prefetch_count)}</tr>`));
    $("qbindings").innerHTML = table("bindings", ["From", "Kind", "To", "Routing key",
      "Arguments", ""], bindingRows(bindings, vhost));
    onUnbind($("qbindings"));
  };
}

export function exchange(el, [vhost, name]) {
  const path = `/exchanges/${enc(vhost)}/${enc(name)}`;
  const history = [];
  el.innerHTML = `<h2>Exchange <span id="xtitle">${esc(name)}</span></h2>
    <p class="muted">Virtual host ${esc(vhost)}</p><div id="xdetails"></div>
    <h3>Message rates (per second)</h3><canvas id="xrates" width="900" height="160"></canvas>
    <div id="xlegend" class="legend"></div>
    <h3>Bindings (this exchange is the source)</h3><div id="xbindings"></div>
    <span id="bindings-result"></span>
    <form id="add-binding"><label>To <select name="kind"><option value="q">queue</option>
      <option value="e">exchange</option></select></label>
      <label>Name <input name="destination" required></label>
      <label>Routing key <input name="routing_key"></label>
      <label>Arguments (JSON) <input name="arguments"></label>
      <button>Bind</button> <span id="add-binding-result"></span></form>
    <h3>Publish message</h3>${publishForm("publish")}
    <h3>Delete</h3><button id="delete">Delete this exchange</button> <span id="delete-result"></span>`;
  $("add-binding").onsubmit = e => { e.preventDefault(); const f = fields(e.target);
    act("add-binding-result", () => api(`/bindings/${enc(vhost)}/e/${enc(name)}/${f.kind}/${enc(f.destination)}`,
      "POST", {routing_key: f.routing_key, arguments: parseJSON(f.arguments, {})})); };
  onPublish("publish", vhost, name, null);
  $("delete").onclick = () => { if (confirm(`Delete exchange ${name}?`))
    act("delete-result", async () => { await api(path, "DELETE"); location.hash = "#/exchanges";
      return "Exchange deleted."; }); };
  return async () => {
    const [x, bindings] = await Promise.all([api(path), api(path + "/bindings/source")]);
    const s = x.message_stats || {};
    $("xdetails").innerHTML = table("xinfo", ["Type", "Durable", "Auto-delete", "Internal",
      "Message rate in", "Message rate out"], [`<tr><td>${esc(x.type)}</td><td>${x.durable}</td>
      <td>${x.auto_delete}</td><td>${x.internal}</td>
      ${num(rate(s.publish_in_details))}${num(rate(s.publish_out_details))}</tr>`]);
    history.push(Object.fromEntries(X_SERIES.map(([k]) => [k, s[k + "_details"]?.rate ?? 0])));
    if (history.length > 150) history.shift();
    drawChart($("xrates"), history, X_SERIES);
    $("xlegend").innerHTML = legend(X_SERIES, history[history.length - 1]);
    $("xbindings").innerHTML = table("bindings", ["From", "Kind", "To", "Routing key",
      "Arguments", ""], bindingRows(bindings, vhost));
    onUnbind($("xbindings"));
  };
}

export function connection(el, [name]) {
  const path = `/connections/${enc(name)}`;
  el.innerHTML = `<h2>Connection <span id="ctitle">${esc(name)}</span></h2>
    <div id="cdetails"></div><h3>Channels</h3><div id="cchannels"></div>
    <h3>Close this connection</h3><form id="close"><label>Reason
      <input name="reason" value="Closed via management plugin"></label>
      <button>Force Close</button> <span id="close-result"></span></form>`;
  $("close").onsubmit = e => { e.preventDefault(); const f = fields(e.target);
    act("close-result", async () => {
      const r = await fetch("/api" + path, {method: "DELETE", credentials: "omit",
        headers: {"Authorization": "Basic " + state.auth,
                  "X-Reason": f.reason}});
      if (!r.ok) throw new Error(`HTTP ${r.status}`);
      return "Connection closed.";
    }); };
  return async () => {
    let c;
    try { c = await api(path); } catch (e) {
      if (e.status === 404) { $("cdetails").innerHTML = '<p class="muted">Connection closed.</p>';
        $("cchannels").innerHTML = ""; return; }
      throw e;
    }
    $("cdetails").innerHTML = table("cinfo", ["User", "Virtual host", "Client", "State",
      "Protocol", "Channels"], [`<tr><td>${esc(c.user)}</td><td>${esc(c.vhost)}</td>
      <td>${esc(c.client_properties?.product ?? "")}</td><td>${esc(c.state)}</td>
      <td>${esc(c.protocol)}</td>${num(c.channels)}</tr>`]);
    $("cchannels").innerHTML = table("channels", CHANNEL_HEAD,
      channelRows(await api(path + "/channels")));
  };
}
