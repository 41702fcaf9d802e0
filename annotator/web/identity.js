// Asks the annotator's own server to set or clear this browser's identity cookie (HttpOnly: no script can read
// or write it). Each request (its `id`) is sent once per page, then reported back so Python stops mounting this.
const sent = new Set();

export default function (component) {
  const { data, setStateValue } = component;
  if (!data || !data.id || sent.has(data.id)) return;
  sent.add(data.id);
  const path = data.action === "forget" ? "/api/identity/forget" : "/api/identity";
  fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: data.token ? { "X-Stepmark-Token": data.token } : {},
  })
    .then((r) => setStateValue("done", r.ok ? data.id : "failed:" + data.id))
    .catch(() => setStateValue("done", "failed:" + data.id));
}
