"""The page at ``/``: a session picker, the live view, and a send box.

One self-contained document (no external resources: the server's
``Content-Security-Policy`` allows none). It reads ``GET /sessions``,
follows ``GET /sessions/<id>/live`` with ``EventSource`` (a snapshot, then
items it applies as ``router.turns.live.apply_item`` does), and sends with
``POST /sessions/<id>/messages``, minting the ``eventId`` itself so that a
send that went unanswered (503) is resent under the same id, up to three
times. A session a limit stopped shows a notice with the stop's reason (from
the snapshot's ``stopped`` and the ``session-stopped`` item) and a button
that resumes it (``POST /sessions/<id>/resume``). Text is always set with
``textContent``, never parsed as HTML.
"""

from __future__ import annotations

from typing import Final

__all__ = ["PAGE"]

PAGE: Final = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>router</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; margin: 0; display: flex; flex-direction: column; height: 100vh; }
  header { padding: .5rem 1rem; border-bottom: 1px solid #ccc; display: flex; gap: .5rem; align-items: center; }
  #log { flex: 1; overflow-y: auto; padding: 1rem; }
  .msg { margin: .4rem 0; padding: .4rem .6rem; border-radius: 6px; white-space: pre-wrap; max-width: 52rem; }
  .user { background: #eef3ff; }
  .assistant { background: #f4f4f4; }
  .card { background: #fff7e0; border-left: 3px solid #e0a800; }
  .reasoning { color: #777; font-style: italic; }
  .tool { font-family: ui-monospace, monospace; font-size: 13px; color: #355; }
  .note { color: #666; font-size: 13px; }
  #notice { padding: .4rem 1rem; background: #fde8e8; border-bottom: 1px solid #e0a0a0; display: flex; gap: .5rem; align-items: center; }
  #notice[hidden] { display: none; }
  form { display: flex; gap: .5rem; padding: .5rem 1rem; border-top: 1px solid #ccc; }
  #text { flex: 1; }
</style>
</head>
<body>
<header>
  <label>session <select id="session"></select></label>
  <button id="new" type="button">new session</button>
  <span id="status" class="note"></span>
</header>
<div id="notice" hidden><span id="reason"></span><button id="resume" type="button">resume</button></div>
<div id="log"></div>
<form id="send"><input id="text" autocomplete="off" placeholder="a message"><button>send</button></form>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let source = null, messages = new Map();
const json = { "content-type": "application/json" };

function status(text) { $("status").textContent = text; }

function stopped(stop) {
  $("notice").hidden = !stop;
  $("reason").textContent = stop ? "stopped: " + stop.reason : "";
}

function render() {
  const log = $("log");
  log.replaceChildren();
  for (const message of messages.values()) {
    const div = document.createElement("div");
    div.className = "msg " + message.role + (message.card ? " card" : "");
    for (const part of message.parts) {
      const span = document.createElement("div");
      if (part.type === "text") span.textContent = part.text;
      else if (part.type === "reasoning") { span.className = "reasoning"; span.textContent = part.text; }
      else if (part.type === "tool") {
        span.className = "tool";
        span.textContent = part.toolName + " " + JSON.stringify(part.input) + " [" + part.state + "]";
      } else if (part.type === "image") span.textContent = "[image]";
      div.appendChild(span);
    }
    log.appendChild(div);
  }
  log.scrollTop = log.scrollHeight;
}

function apply(item) {
  if (item.type === "message") messages.set(item.message.id, item.message);
  else if (item.type === "text-delta" || item.type === "reasoning-delta") {
    const message = messages.get(item.messageId);
    if (!message) return;
    const kind = item.type === "text-delta" ? "text" : "reasoning";
    const parts = message.parts.map((p) => ({ ...p }));
    const last = parts[parts.length - 1];
    if (last && last.type === kind) last.text += item.delta; else parts.push({ type: kind, text: item.delta });
    messages.set(message.id, { ...message, parts });
  } else if (item.type === "turn-start") status("working…");
  else if (item.type === "turn-end") status("");
  else if (item.type === "session-stopped") stopped(item);
  else if (item.type === "session-resumed") stopped(null);
}

function follow(id) {
  if (source) source.close();
  messages = new Map();
  stopped(null);
  render();
  if (!id) return;
  source = new EventSource("/sessions/" + encodeURIComponent(id) + "/live");
  source.addEventListener("snapshot", (e) => {
    const snapshot = JSON.parse(e.data);
    messages = new Map(snapshot.messages.map((m) => [m.id, m]));
    status(snapshot.busy ? "working…" : "");
    stopped(snapshot.stopped || null);
    render();
  });
  source.onmessage = (e) => { apply(JSON.parse(e.data)); render(); };
  source.addEventListener("lagged", () => { source.close(); follow(id); });
  source.addEventListener("error", () => status("reconnecting…"));
}

async function sessions(select) {
  const response = await fetch("/sessions");
  const body = await response.json();
  if (!response.ok) { status(body.error + ": " + body.message); return; }
  const box = $("session"), keep = select || box.value;
  box.replaceChildren();
  for (const s of body.sessions) {
    const option = document.createElement("option");
    option.value = s.id;
    option.textContent = s.id + " (" + s.kind + ")";
    box.appendChild(option);
  }
  if (keep) box.value = keep;
  follow(box.value);
}

async function send(text) {
  const id = $("session").value, eventId = crypto.randomUUID();
  for (let attempt = 0; attempt < 3; attempt++) {
    const response = await fetch("/sessions/" + encodeURIComponent(id) + "/messages", {
      method: "POST", headers: json, body: JSON.stringify({ text, eventId }),
    });
    const body = await response.json();
    if (response.ok) {
      status(body.status === "dropped" ? "the session dropped your message: " + body.reason : "");
      return;
    }
    status(body.error + ": " + body.message);
    if (response.status !== 503 || !body.eventId) return;  // only an unanswered send is resent
    await new Promise((done) => setTimeout(done, 1000 * (attempt + 1)));
  }
}

$("session").onchange = () => follow($("session").value);
$("new").onclick = async () => {
  const response = await fetch("/sessions", { method: "POST", headers: json, body: "{}" });
  const body = await response.json();
  if (!response.ok) { status(body.error + ": " + body.message); return; }
  sessions(body.id);
};
$("resume").onclick = async () => {
  const id = $("session").value;
  const response = await fetch("/sessions/" + encodeURIComponent(id) + "/resume", { method: "POST", headers: json, body: "{}" });
  const body = await response.json();
  if (!response.ok) status(body.error + ": " + body.message);
};
$("send").onsubmit = (e) => {
  e.preventDefault();
  const text = $("text").value.trim();
  if (!text) return;
  $("text").value = "";
  send(text);
};
sessions();
</script>
</body>
</html>
"""
