// kproxy live view: renders one page of service ports, follows the event
// stream (server-sent events), and drives crashes when the process has
// fault injection on (the token is in the page only then).
"use strict";

const token = document.querySelector('meta[name="kproxy-token"]').content;
const faults = token !== "";
const view = { q: "", offset: 0, limit: 50, matched: 0, loading: false, again: false };
const maxEvents = 200;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v; else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function time(t) { return t ? new Date(t).toLocaleTimeString() : ""; }

function actorView(a) {
  const parts = [el("span", { class: "name" }, a.role), el("span", {}, "restarts " + a.restarts), el("span", { class: "muted" }, a.status)];
  if (a.lastFailure) parts.push(el("span", { class: "muted", title: a.lastFailure.reason }, "last failure " + time(a.lastFailure.at) + ": " + a.lastFailure.reason));
  if (a.lastRestartMs) parts.push(el("span", { class: "muted" }, "back in " + a.lastRestartMs.toFixed(1) + " ms"));
  if (faults) parts.push(el("button", { type: "button", "data-crash": a.role, title: "crash " + a.id }, "crash"));
  return el("span", { class: "actor", "data-role": a.role, "data-restarts": a.restarts, "data-status": a.status, "data-actor": a.id }, ...parts);
}

function bytes(n) {
  if (n < 1024) return n + " B";
  const u = ["KiB", "MiB", "GiB", "TiB"];
  let i = -1;
  do { n /= 1024; i++; } while (n >= 1024 && i < u.length - 1);
  return n.toFixed(1) + " " + u[i];
}

function rowView(r) {
  const t = r.traffic;
  const head = el("div", {},
    el("span", { class: "title" }, r.id),
    el("span", { class: "muted" }, "  listening " + (r.listen.length ? r.listen.join(", ") : "nowhere") + (r.proxyPort ? " · proxy port " + r.proxyPort : "")),
    el("div", { class: "muted", "data-traffic": "" },
      "connections " + t.activeConns + " active / " + t.conns + " total · flows " + t.activeFlows + " / " + t.flows +
      " · bytes " + bytes(t.bytesToEndpoint) + " out, " + bytes(t.bytesToClient) + " back · failed dials " + t.dialFailures));
  if (r.error) head.append(el("div", { class: "error" }, r.error));
  const eps = el("table", { class: "eps" }, el("tr", {}, el("th", {}, "endpoint"), el("th", {}, "ready"), el("th", {}, "local"), el("th", {}, "node"), el("th", {}, "ejected")));
  for (const e of r.endpoints) {
    eps.append(el("tr", { "data-endpoint": e.address, "data-ejected": e.ejectedUntil ? true : null },
      el("td", {}, e.address), el("td", {}, e.ready ? "ready" : e.serving ? "serving" : e.terminating ? "terminating" : "not ready"),
      el("td", {}, e.local ? "local" : ""), el("td", {}, e.node || ""),
      el("td", {}, e.ejectedUntil ? "until " + time(e.ejectedUntil) + " (" + e.ejections + "×)" : "")));
  }
  const more = r.endpointsTotal > r.endpoints.length ? el("div", { class: "muted" }, (r.endpointsTotal - r.endpoints.length) + " more endpoints") : null;
  return el("div", { class: "node", "data-service-port": r.id, "data-generation": r.generation }, head,
    el("div", { class: "children" }, ...r.actors.map(actorView)), eps, more);
}

function renderTree(t) {
  const top = document.getElementById("top");
  top.replaceChildren(el("div", { class: "node", "data-role": "supervisor" },
    el("span", { class: "title" }, t.supervisor + " (supervisor)"),
    el("div", { class: "children" }, ...t.top.map(actorView),
      el("div", { class: "muted" }, "proxier → " + t.servicePorts + " service ports (below)"))));
  document.getElementById("totals").textContent = t.servicePorts + " service ports · " + t.restarts + " restarts";
  document.getElementById("storm").hidden = !(faults && t.faultInjection);
}

async function loadPage() {
  if (view.loading) { view.again = true; return; }
  view.loading = true;
  try {
    const p = new URLSearchParams({ q: view.q, offset: view.offset, limit: view.limit });
    const res = await fetch("/api/servicePorts?" + p);
    if (!res.ok) return;
    const page = await res.json();
    view.matched = page.matched;
    document.getElementById("ports").replaceChildren(...page.items.map(rowView));
    const last = Math.min(page.offset + page.items.length, page.matched);
    document.getElementById("pageinfo").textContent = (page.matched ? page.offset + 1 : 0) + "–" + last + " of " + page.matched +
      (page.matched !== page.total ? " (" + page.total + " in all)" : "");
    document.getElementById("prev").disabled = page.offset === 0;
    document.getElementById("next").disabled = last >= page.matched;
  } finally {
    view.loading = false;
    if (view.again) { view.again = false; loadPage(); }
  }
}

function updateRow(r) {
  if (!r) return;
  const old = document.querySelector('[data-service-port="' + CSS.escape(r.id) + '"]');
  if (old) old.replaceWith(rowView(r));
}

function addEvent(e) {
  const list = document.getElementById("events");
  list.prepend(el("li", { "data-kind": e.kind, "data-service-port": e.servicePort || null, "data-role": e.role || null, "data-seq": e.seq },
    el("time", {}, time(e.at)), e.text));
  while (list.children.length > maxEvents) list.lastChild.remove();
}

function connect() {
  const status = document.getElementById("status");
  const es = new EventSource("/api/events");
  const set = s => { status.textContent = s; status.dataset.state = s; };
  es.onopen = () => set("connected");
  es.onerror = () => set(es.readyState === EventSource.CLOSED ? "disconnected" : "connecting");
  es.addEventListener("tick", m => { renderTree(JSON.parse(m.data)); loadPage(); });
  for (const kind of ["restart", "change", "storm"]) {
    es.addEventListener(kind, m => { const e = JSON.parse(m.data); addEvent(e); updateRow(e.row); });
  }
  es.addEventListener("dropped", m => addEvent({ kind: "dropped", at: new Date().toISOString(), text: JSON.parse(m.data).dropped + " events dropped (this page fell behind)" }));
}

async function post(path, body) {
  const res = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json", "X-Kproxy-Token": token }, body: JSON.stringify(body) });
  if (!res.ok) {
    const err = await res.json().catch(() => ({ error: res.statusText }));
    addEvent({ kind: "error", at: new Date().toISOString(), text: path + ": " + err.error });
  }
}

document.addEventListener("click", ev => {
  const b = ev.target.closest("button");
  if (!b) return;
  if (b.dataset.crash) {
    const row = b.closest("[data-service-port]");
    post("/api/crash", row ? { servicePort: row.dataset.servicePort, actor: b.dataset.crash } : { actor: b.dataset.crash });
  } else if (b.id === "storm") {
    post("/api/storm", {});
  } else if (b.id === "prev") {
    view.offset = Math.max(0, view.offset - view.limit); loadPage();
  } else if (b.id === "next") {
    if (view.offset + view.limit < view.matched) { view.offset += view.limit; loadPage(); }
  }
});

let filterTimer;
document.getElementById("filter").addEventListener("input", ev => {
  clearTimeout(filterTimer);
  filterTimer = setTimeout(() => { view.q = ev.target.value.trim(); view.offset = 0; loadPage(); }, 150);
});

fetch("/api/tree").then(r => r.json()).then(renderTree);
loadPage();
connect();
