// Shared by every page: JSON calls that carry the CSRF token, messages, log out.
"use strict";
const WB = {
  csrf() { return document.querySelector('meta[name="csrf-token"]').content; },
  async call(method, url, data, raw) {
    const opts = { method, headers: { "X-CSRF-Token": WB.csrf() }, credentials: "same-origin" };
    if (raw !== undefined) { opts.body = raw; opts.headers["Content-Type"] = "application/octet-stream"; }
    else if (data !== undefined) { opts.body = JSON.stringify(data); opts.headers["Content-Type"] = "application/json"; }
    const r = await fetch(url, opts);
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    if (!r.ok) { const msg = (body && body.error) || r.statusText; WB.say(msg); throw new Error(msg); }
    return body;
  },
  say(text) { document.getElementById("message").textContent = text || ""; },
};
document.addEventListener("DOMContentLoaded", () => {
  const out = document.getElementById("logout");
  if (out) out.addEventListener("click", async () => { await WB.call("POST", "/api/logout", {}); location.href = "/login"; });
});
