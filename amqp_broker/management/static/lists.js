// The list tabs: Connections, Channels, Exchanges, Queues and Streams (with RabbitMQ's "Add a new
// exchange" / "Add a new queue" forms). Names link to the object's own page.
import {api, act, enc, esc, features, fields, num, parseJSON, rate, table, $} from "./api.js";

const link = (kind, vhost, name) => `#/${kind}/${enc(vhost)}/${enc(name === "" ? "amq.default" : name)}`;

export function connections(el) {
  el.innerHTML = `<h2>Connections</h2><div id="list"></div>`;
  return async () => {
    const conns = await api("/connections");
    $("list").innerHTML = table("connections", ["Name", "User", "Virtual host", "Client", "State",
      "Channels"], conns.map(x => `<tr data-connection="${esc(x.name)}">
      <td><a href="#/connections/${enc(x.name)}">${esc(x.name)}</a></td><td>${esc(x.user)}</td>
      <td>${esc(x.vhost)}</td><td>${esc(x.client_properties?.product ?? "")}</td>
      <td>${esc(x.state)}</td>${num(x.channels)}</tr>`));
  };
}

export function channelRows(channels) {
  return channels.map(x => {
    const s = x.message_stats || {};
    return `<tr data-channel="${esc(x.name)}"><td>${esc(x.name)}</td><td>${esc(x.user)}</td>
      <td>${x.confirm ? "C" : ""}${x.transactional ? "T" : ""}</td>${num(x.prefetch_count)}
      ${num(x.messages_unacknowledged)}${num(x.consumer_count)}
      ${num(rate(s.publish_details))}${num(rate(s.deliver_get_details))}${num(rate(s.ack_details))}</tr>`;
  });
}

export const CHANNEL_HEAD = ["Channel", "User", "Mode", "Prefetch", "Unacked", "Consumers",
  "Publish", "Deliver / get", "Ack"];

export function channels(el) {
  el.innerHTML = `<h2>Channels</h2><div id="list"></div>`;
  return async () => {
    $("list").innerHTML = table("channels", CHANNEL_HEAD, channelRows(await api("/channels")));
  };
}

export function exchanges(el) {
  el.innerHTML = `<h2>Exchanges</h2><div id="list"></div>
    <h3>Add a new exchange</h3>
    <form id="add-exchange"><label>Virtual host <input name="vhost" value="/"></label>
      <label>Name <input name="name" required></label>
      <label>Type <select name="type"><option>direct</option><option>fanout</option>
        <option>topic</option><option>headers</option></select></label>
      <label>Durable <input type="checkbox" name="durable" checked></label>
      <button>Add exchange</button> <span id="add-exchange-result"></span></form>`;
  $("add-exchange").onsubmit = e => { e.preventDefault(); const f = fields(e.target);
    act("add-exchange-result", () => api(`/exchanges/${enc(f.vhost)}/${enc(f.name)}`, "PUT",
      {type: f.type, durable: f.durable, auto_delete: false, internal: false, arguments: {}})); };
  return async () => {
    const list = await api("/exchanges");
    $("list").innerHTML = table("exchanges", ["Virtual host", "Name", "Type", "Features",
      "Message rate in", "Message rate out"], list.map(x => `<tr data-exchange="${esc(x.name)}">
      <td>${esc(x.vhost)}</td>
      <td><a href="${link("exchanges", x.vhost, x.name)}">${esc(x.name || "(AMQP default)")}</a></td>
      <td>${esc(x.type)}</td><td>${features(x)}</td>
      ${num(rate(x.message_stats?.publish_in_details))}${num(rate(x.message_stats?.publish_out_details))}</tr>`));
  };
}

export function queues(el) {
  el.innerHTML = `<h2>Queues and Streams</h2><div id="list"></div>
    <h3>Add a new queue</h3>
    <form id="add-queue"><label>Virtual host <input name="vhost" value="/"></label>
      <label>Type <select name="type"><option>classic</option><option>quorum</option>
        <option>stream</option></select></label>
      <label>Name <input name="name" required></label>
      <label>Durable <input type="checkbox" name="durable" checked></label>
      <label>Arguments (JSON) <input name="arguments" placeholder='{"x-max-length": 10}'></label>
      <button>Add queue</button> <span id="add-queue-result"></span></form>`;
  $("add-queue").onsubmit = e => { e.preventDefault(); const f = fields(e.target);
    act("add-queue-result", () => {
      const args = parseJSON(f.arguments, {});
      if (f.type !== "classic") args["x-queue-type"] = f.type;
      return api(`/queues/${enc(f.vhost)}/${enc(f.name)}`, "PUT",
        {durable: f.durable || f.type !== "classic", auto_delete: false, arguments: args});
    }); };
  return async () => {
    const list = await api("/queues");
    $("list").innerHTML = table("queues", ["Virtual host", "Name", "Type", "Features", "State",
      "Ready", "Unacked", "Total", "Consumers", "Incoming", "Deliver / get", "Ack",
      "Net change"], list.map(x =>
      `<tr data-queue="${esc(x.name)}"><td>${esc(x.vhost)}</td>
      <td class="qname"><a href="${link("queues", x.vhost, x.name)}">${esc(x.name)}</a></td>
      <td>${esc(x.type)}</td><td>${features(x)}</td><td>${esc(x.state)}</td>
      ${num(x.messages_ready)}${num(x.messages_unacknowledged)}
      <td class="num qmessages">${esc(x.messages)}</td>${num(x.consumers)}
      ${num(rate(x.message_stats?.publish_details))}${num(rate(x.message_stats?.deliver_get_details))}
      ${num(rate(x.message_stats?.ack_details))}${num(rate(x.messages_details))}</tr>`));
  };
}
