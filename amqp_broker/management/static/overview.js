// Overview: totals, the node's message rates over time (message_stats *_details.rate), the
// cluster's members with each one's role, and per replicated queue its leader, replicas and lag.
import {api, esc, table, $} from "./api.js";
import {drawChart, legend} from "./chart.js";

const SERIES = [["publish", "#2a7ab0", "Publish"], ["deliver_get", "#3a9a4a", "Deliver / get"],
                ["ack", "#c07a1a", "Ack"], ["confirm", "#8a4ab0", "Confirm"]];
const history = [];

export function replicaRows(queues) {
  return queues.filter(q => q.members).map(q => {
    const synced = q.members_in_sync;
    const lag = m => synced == null ? "unknown" : synced.includes(m) ? "in sync" : "behind";
    return `<tr data-replicated="${esc(q.name)}"><td>${esc(q.vhost)}</td>
      <td><a href="#/queues/${encodeURIComponent(q.vhost)}/${encodeURIComponent(q.name)}">${esc(q.name)}</a></td>
      <td>${esc(q.type)}</td><td class="qleader">${esc(q.leader ?? "(election)")}</td>
      <td>${q.members.map(m => `${esc(m)}${m === q.leader ? " (leader)" : ""}: ` +
        `<span class="lag">${lag(m)}</span>`).join("<br>")}</td>
      <td class="num">${esc(q.messages)}</td></tr>`;
  });
}

export function overview(el) {
  el.innerHTML = `<h2>Overview</h2><div id="totals" class="cards"></div>
    <h3>Message rates (per second)</h3>
    <canvas id="rates" width="900" height="200"></canvas><div id="legend" class="legend"></div>
    <h3>Cluster members</h3><div id="cluster"></div>
    <h3>Replicated queues: leader, replicas and lag</h3><div id="replicas"></div>`;
  return async () => {
    const [overview, queues] = await Promise.all([api("/overview"), api("/queues")]);
    let cluster = null;
    try { cluster = await api("/cluster-status"); } catch (e) { cluster = null; }
    const t = overview.object_totals, q = overview.queue_totals;
    $("totals").innerHTML = [["Connections", t.connections], ["Channels", t.channels],
      ["Exchanges", t.exchanges], ["Queues", t.queues], ["Consumers", t.consumers],
      ["Ready", q.messages_ready], ["Unacked", q.messages_unacknowledged],
      ["Total messages", q.messages]].map(([k, v]) =>
      `<div class="card">${esc(k)}<b>${esc(v)}</b></div>`).join("");
    const stats = overview.message_stats || {};
    history.push(Object.fromEntries(SERIES.map(([k]) => [k, stats[k + "_details"]?.rate ?? 0])));
    if (history.length > 150) history.shift();
    drawChart($("rates"), history, SERIES);
    $("legend").innerHTML = legend(SERIES, history[history.length - 1]);
    const names = cluster ? cluster.member_names || [] : [overview.node];
    const leader = cluster ? cluster.leader : overview.node;
    $("cluster").innerHTML = (cluster ? `<p>Cluster <b>${esc(cluster.cluster_name)}</b>,
      view ${esc(cluster.view)}, ${names.length} member(s)</p>` : "") +
      table("members", ["Member", "Address", "Role"], names.map((n, i) =>
        `<tr data-member="${esc(n)}"><td>${esc(n)}</td>
        <td>${esc(cluster ? (cluster.members || [])[i] || "" : "")}</td>
        <td class="role">${n === leader ? "leader" : "member"}</td></tr>`));
    $("replicas").innerHTML = table("replicated", ["Virtual host", "Queue", "Type", "Leader",
      "Replicas (lag)", "Messages"], replicaRows(queues));
  };
}
