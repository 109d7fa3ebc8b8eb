// The desk's one script: the WebAuthn ceremonies. Served as a file so the
// Content-Security-Policy can forbid every inline script.
"use strict";

function b64u(buf) {
  const s = String.fromCharCode(...new Uint8Array(buf));
  return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}
function unb64u(s) {
  s = s.replace(/-/g, "+").replace(/_/g, "/");
  while (s.length % 4) s += "=";
  return Uint8Array.from(atob(s), c => c.charCodeAt(0)).buffer;
}
function say(text) {
  document.getElementById("status").textContent = text;
}
async function post(url, body) {
  const r = await fetch(url, {method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify(body || {})});
  const j = await r.json().catch(() => ({error: "HTTP " + r.status}));
  if (!r.ok) throw new Error(j.error || ("HTTP " + r.status));
  return j;
}
function ids(list) {
  return (list || []).map(c => Object.assign({}, c, {id: unb64u(c.id)}));
}
async function create(optionsURL, finishURL) {
  const o = (await post(optionsURL)).publicKey;
  o.challenge = unb64u(o.challenge);
  o.user.id = unb64u(o.user.id);
  o.excludeCredentials = ids(o.excludeCredentials);
  const c = await navigator.credentials.create({publicKey: o});
  return post(finishURL, {id: c.id, rawId: b64u(c.rawId), type: c.type,
    response: {clientDataJSON: b64u(c.response.clientDataJSON), attestationObject: b64u(c.response.attestationObject),
      transports: c.response.getTransports ? c.response.getTransports() : []}});
}
async function get(optionsURL, body, finishURL) {
  const o = (await post(optionsURL, body)).publicKey;
  o.challenge = unb64u(o.challenge);
  o.allowCredentials = ids(o.allowCredentials);
  const c = await navigator.credentials.get({publicKey: o});
  const r = c.response;
  return post(finishURL, {id: c.id, rawId: b64u(c.rawId), type: c.type,
    response: {clientDataJSON: b64u(r.clientDataJSON), authenticatorData: b64u(r.authenticatorData),
      signature: b64u(r.signature), userHandle: r.userHandle ? b64u(r.userHandle) : null}});
}
function on(id, fn) {
  const b = document.getElementById(id);
  if (!b) return;
  b.addEventListener("click", async () => {
    b.disabled = true;
    say("Waiting for your passkey…");
    try {
      const j = await fn(b);
      say("Done.");
      if (j.next) location.assign(j.next);
    } catch (e) {
      say("Failed: " + e.message);
      b.disabled = false;
    }
  });
}
document.addEventListener("DOMContentLoaded", () => {
  on("enroll", b => create("/api/enroll/" + b.dataset.token + "/options", "/api/enroll/" + b.dataset.token));
  on("login", () => get("/api/login/options", {}, "/api/login"));
  on("approve", b => get("/g/" + b.dataset.gate + "/approve/options", {sha256: b.dataset.sha, subject: b.dataset.subject,
    old: !!(document.getElementById("old-ok") || {}).checked}, "/g/" + b.dataset.gate + "/approve"));
});
