// Admin: users, virtual hosts, permissions, policies, definitions export / import; each form
// calls the API endpoint RabbitMQ's management UI calls for it.
import {api, act, enc, esc, fields, parseJSON, table, $} from "./api.js";

export function admin(el) {
  el.innerHTML = `<h2>Admin</h2>
    <h3>Users</h3><div id="users"></div>
    <form id="add-user"><label>Username <input name="name" required></label>
      <label>Password <input name="password" type="password"></label>
      <label>Tags <input name="tags" placeholder="administrator"></label>
      <button>Add user</button> <span id="add-user-result"></span></form>
    <h3>Virtual hosts</h3><div id="vhosts"></div>
    <form id="add-vhost"><label>Name <input name="name" required></label>
      <label>Description <input name="description"></label>
      <button>Add virtual host</button> <span id="add-vhost-result"></span></form>
    <h3>Permissions</h3><div id="permissions"></div>
    <form id="set-permission"><label>User <input name="user" required></label>
      <label>Virtual host <input name="vhost" value="/"></label>
      <label>Configure <input name="configure" value=".*"></label>
      <label>Write <input name="write" value=".*"></label>
      <label>Read <input name="read" value=".*"></label>
      <button>Set permission</button> <span id="set-permission-result"></span></form>
    <h3>Policies</h3><div id="policies"></div>
    <form id="add-policy"><label>Virtual host <input name="vhost" value="/"></label>
      <label>Name <input name="name" required></label>
      <label>Pattern <input name="pattern" required></label>
      <label>Apply to <select name="apply-to"><option>all</option><option>queues</option>
        <option>exchanges</option></select></label>
      <label>Priority <input name="priority" value="0" size="3"></label>
      <label>Definition (JSON) <input name="definition" required placeholder='{"max-length": 10}'></label>
      <button>Add / update policy</button> <span id="add-policy-result"></span></form>
    <h3>Definitions</h3>
    <button id="export">Download broker definitions</button> <span id="export-result"></span>
    <form id="import"><label>Definitions file <input type="file" name="file" accept=".json"></label>
      <button>Upload broker definitions</button> <span id="import-result"></span></form>`;
  $("add-user").onsubmit = e => { e.preventDefault(); const f = fields(e.target);
    act("add-user-result", () => api(`/users/${enc(f.name)}`, "PUT",
      {password: f.password, tags: f.tags})); };
  $("add-vhost").onsubmit = e => { e.preventDefault(); const f = fields(e.target);
    act("add-vhost-result", () => api(`/vhosts/${enc(f.name)}`, "PUT",
      {description: f.description})); };
  $("set-permission").onsubmit = e => { e.preventDefault(); const f = fields(e.target);
    act("set-permission-result", () => api(`/permissions/${enc(f.vhost)}/${enc(f.user)}`, "PUT",
      {configure: f.configure, write: f.write, read: f.read})); };
  $("add-policy").onsubmit = e => { e.preventDefault(); const f = fields(e.target);
    act("add-policy-result", () => api(`/policies/${enc(f.vhost)}/${enc(f.name)}`, "PUT",
      {pattern: f.pattern, "apply-to": f["apply-to"], priority: Number(f.priority),
       definition: parseJSON(f.definition, {})})); };
  $("export").onclick = () => act("export-result", async () => {
    const defs = await api("/definitions");
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([JSON.stringify(defs, null, 2)],
      {type: "application/json"}));
    a.download = "definitions.json"; document.body.append(a); a.click(); a.remove();
    return `Exported ${defs.queues.length} queue(s), ${defs.users.length} user(s).`;
  });
  $("import").onsubmit = e => { e.preventDefault();
    act("import-result", async () => {
      const file = e.target.elements.file.files[0];
      if (!file) throw new Error("Choose a definitions file first.");
      await api("/definitions", "POST", JSON.parse(await file.text()));
      return "Definitions imported.";
    }); };
  const remove = (id, path) => $(id).querySelectorAll("button[data-delete]").forEach(b => {
    b.onclick = () => act(`${id}-result`, () => api(path(b.dataset.delete), "DELETE")); });
  return async () => {
    const [users, vhosts, perms, policies] = await Promise.all([api("/users"), api("/vhosts"),
      api("/permissions"), api("/policies")]);
    $("users").innerHTML = table("user-list", ["Name", "Tags", ""], users.map(u =>
      `<tr data-user="${esc(u.name)}"><td>${esc(u.name)}</td><td>${esc([].concat(u.tags).join(", "))}</td>
      <td><button data-delete="${esc(u.name)}">Delete</button></td></tr>`)) +
      '<span id="users-result"></span>';
    remove("users", n => `/users/${enc(n)}`);
    $("vhosts").innerHTML = table("vhost-list", ["Name", "Description", "Messages"], vhosts.map(v =>
      `<tr data-vhost="${esc(v.name)}"><td>${esc(v.name)}</td><td>${esc(v.description)}</td>
      <td class="num">${esc(v.messages ?? "")}</td></tr>`));
    $("permissions").innerHTML = table("permission-list", ["User", "Virtual host", "Configure",
      "Write", "Read"], perms.map(p => `<tr data-permission="${esc(p.user)}|${esc(p.vhost)}">
      <td>${esc(p.user)}</td><td>${esc(p.vhost)}</td><td>${esc(p.configure)}</td>
      <td>${esc(p.write)}</td><td>${esc(p.read)}</td></tr>`));
    $("policies").innerHTML = table("policy-list", ["Virtual host", "Name", "Pattern", "Apply to",
      "Definition", "Priority"], policies.map(p => `<tr data-policy="${esc(p.name)}">
      <td>${esc(p.vhost)}</td><td>${esc(p.name)}</td><td>${esc(p.pattern)}</td>
      <td>${esc(p["apply-to"])}</td><td>${esc(JSON.stringify(p.definition))}</td>
      <td class="num">${esc(p.priority)}</td></tr>`));
  };
}
