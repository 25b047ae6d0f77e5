// The router's page: the board of every session, one session's live view, and
// a send box whose messages are never lost.
//
// Served inline in page.html (router/api/page.py puts it there). The parts
// that decide something are plain functions on plain values, exported for
// node when there is no document (tests/api/test_page.py runs them):
//
//   markdown(text)        -> a tree of {tag, text?, children?, lang?} nodes
//   SseParser             -> server-sent events from text chunks, with ids
//   Outbox                -> the pending sends, kept in a Storage object
//   outcomeText(status, body) -> what became of one send, in words
//
// Everything shown is set with textContent or built as elements: nothing the
// server or a model sent is ever parsed as HTML.
"use strict";

// ------------------------------------------------------------------ markdown

// A small Markdown subset, as models write it: fenced code blocks, headings,
// lists (nested by indent is flattened), block quotes, paragraphs; inline
// code, bold, italics and links. The result is a plain tree, turned into
// elements by build() below.
function markdown(text) {
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^\s*(```+|~~~+)\s*([\w+-]*)\s*$/.exec(line);
    if (fence) {
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++; // the closing fence (or the end)
      blocks.push({ tag: "pre", lang: fence[2] || "", text: body.join("\n") });
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      blocks.push({ tag: "h" + Math.min(heading[1].length + 2, 6), children: inline(heading[2]) });
      i++;
      continue;
    }
    const bullet = /^\s*([-*+]|\d+[.)])\s+/;
    if (bullet.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const items = [];
      while (i < lines.length && bullet.test(lines[i]) && /^\s*\d/.test(lines[i]) === ordered) {
        items.push({ tag: "li", children: inline(lines[i].replace(bullet, "")) });
        i++;
      }
      blocks.push({ tag: ordered ? "ol" : "ul", children: items });
      continue;
    }
    if (/^\s*>/.test(line)) {
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
      blocks.push({ tag: "blockquote", children: markdown(quoted.join("\n")) });
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !bullet.test(lines[i]) && !/^(#{1,6})\s/.test(lines[i])
           && !/^\s*(```|~~~)/.test(lines[i]) && !/^\s*>/.test(lines[i])) para.push(lines[i++]);
    blocks.push({ tag: "p", children: inline(para.join("\n")) });
  }
  return blocks;
}

// Inline spans: `code` first (nothing inside it is markup), then links,
// **bold** and *italic* / _italic_. Unmatched markers stay as text.
function inline(text) {
  const out = [];
  const pattern = /`([^`]+)`|\[([^\]]+)\]\(([^)\s]+)\)|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|\b_([^_]+)_\b/g;
  let last = 0, match;
  while ((match = pattern.exec(text)) !== null) {
    if (match.index > last) out.push({ tag: "#text", text: text.slice(last, match.index) });
    if (match[1] !== undefined) out.push({ tag: "code", text: match[1] });
    else if (match[2] !== undefined) out.push({ tag: "a", text: match[2], href: safeHref(match[3]) });
    else if (match[4] !== undefined) out.push({ tag: "strong", children: inline(match[4]) });
    else out.push({ tag: "em", children: inline(match[5] !== undefined ? match[5] : match[6]) });
    last = pattern.lastIndex;
  }
  if (last < text.length) out.push({ tag: "#text", text: text.slice(last) });
  return out;
}

// Only http(s) links become links; anything else (javascript:, data:) is shown
// as text.
function safeHref(url) {
  return /^https?:\/\//i.test(url) ? url : null;
}

// ------------------------------------------------------------------ server-sent events

// Server-sent events from text as it arrives (the WHATWG rules: lines, a
// blank line ends an event, "data" lines join with newlines, "id" sets the
// last event id even on an event without data, ":" lines are comments).
class SseParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = "";
    this.lastId = null;
    this.reset();
  }
  reset() { this.data = []; this.event = "message"; this.id = null; }
  feed(chunk) {
    this.buffer += chunk;
    let end;
    while ((end = this.buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = this.buffer.slice(0, end);
      const newline = this.buffer.startsWith("\r\n", end) ? 2 : 1;
      if (this.buffer[end] === "\r" && end + 1 === this.buffer.length) break; // a \r\n may be split
      this.buffer = this.buffer.slice(end + newline);
      this.line(line);
    }
  }
  line(line) {
    if (line === "") {
      if (this.id !== null) this.lastId = this.id;
      if (this.data.length) this.onEvent({ event: this.event, data: this.data.join("\n"), id: this.lastId });
      this.reset();
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.event = value;
    else if (field === "id" && !value.includes("\0")) this.id = value;
  }
}

// ------------------------------------------------------------------ the outbox

// Sends not yet answered, kept in a Storage (the browser's localStorage), so a
// message typed while the server is unreachable, or a page closed before the
// answer came, is sent when the server is back: under the same event id, so
// the router answers it exactly once whatever the number of tries.
const OUTBOX_KEY = "router.outbox";

class Outbox {
  constructor(storage) { this.storage = storage; }
  all() {
    try {
      const list = JSON.parse(this.storage.getItem(OUTBOX_KEY) || "[]");
      return Array.isArray(list) ? list.filter((p) => p && typeof p.eventId === "string") : [];
    } catch (_) {
      return [];
    }
  }
  save(list) { this.storage.setItem(OUTBOX_KEY, JSON.stringify(list)); }
  add(session, text, eventId, now, router) {
    const entry = { eventId, session, router: router || "", text, createdAt: now, tries: 0 };
    this.save([...this.all(), entry]);
    return entry;
  }
  tried(eventId, note) {
    this.save(this.all().map((p) => (p.eventId === eventId ? { ...p, tries: p.tries + 1, note } : p)));
  }
  settle(eventId) { this.save(this.all().filter((p) => p.eventId !== eventId)); }
  of(session) { return this.all().filter((p) => p.session === session); }
}

// What an answer means to the person. `status` is the HTTP status (0: no
// answer at all), `body` the JSON the router answered.
function outcomeText(status, body) {
  body = body || {};
  if (status === 0) return { final: false, text: "not sent yet: the router is unreachable; it is kept and sent when the router is back" };
  if (status === 503 && body.eventId) return { final: false, text: "unanswered (" + body.error + "): it will be sent again" };
  if (status >= 400) return { final: true, text: "refused: " + (body.error || status) + ": " + (body.message || "") };
  if (body.status === "dropped") return { final: true, text: "the session dropped it: " + (body.reason || "no reason given") };
  // The provider's usage limit: kept by the router, it goes in once at the reset.
  if (body.status === "parked") return { final: true, text: "kept: " + parkedText(body) };
  if (body.as === "row") return { final: true, text: "written into the running turn" };
  // A container session's answer says how the prompt was handed over, not
  // whether a turn was running at that moment.
  if (body.whenBusy === "steer") return { final: true, text: "started as a prompt (steered into the running turn, if one runs)" };
  if (body.whenBusy === "followUp") return { final: true, text: "started as a prompt (queued as a follow-up, if a turn runs)" };
  if (body.as === "prompt") return { final: true, text: "started as a prompt" };
  return { final: true, text: "delivered" };
}

// A park (a board entry's ``parked``, a live item, a send's answer) in
// words: when the provider's limit resets, in the reader's own time and in UTC.
function parkedText(park) {
  const at = (ms) => {
    const when = new Date(ms);
    return when.toLocaleString([], { hour: "2-digit", minute: "2-digit", weekday: "short" }) + " (" +
      when.toISOString().slice(11, 16) + " UTC)";
  };
  const account = park.account ? " of account " + park.account : "";
  return "parked: the provider's usage limit" + account + " resets " + at(park.resetsAt) +
    (park.resumeAt ? "; kept messages go in at about " + at(park.resumeAt) : "");
}

// A listed session's key: the router that holds it and its id (two routers
// may each hold a "root").
function keyOf(session) {
  const router = session && session.router && typeof session.router.name === "string" ? session.router.name : "";
  return router + "\u0000" + session.id;
}

// The board after one event of GET /board/live: a snapshot replaces it, a
// session added or changed is put in place (in the order it came), a session
// removed is taken out. Unknown events change nothing.
function applyBoard(board, event) {
  if (event.type === "snapshot") return (event.sessions || []).slice();
  if (event.type === "session-added" || event.type === "session-changed") {
    const key = keyOf(event.session);
    const index = board.findIndex((s) => keyOf(s) === key);
    if (index < 0) return [...board, event.session];
    const next = board.slice();
    next[index] = event.session;
    return next;
  }
  if (event.type === "session-removed") {
    const key = keyOf(event.session);
    return board.filter((s) => keyOf(s) !== key);
  }
  return board;
}

// A session's state for the board, from what GET /sessions says of it.
function stateOf(session) {
  if (typeof session.state === "string") return session.state;
  if (session.stopped) return "stopped";
  return session.busy ? "working" : "idle";
}

if (typeof module !== "undefined") {
  module.exports = { markdown, inline, safeHref, SseParser, Outbox, outcomeText, parkedText, stateOf, keyOf, applyBoard,
    OUTBOX_KEY };
}

// ------------------------------------------------------------------ the page

if (typeof document !== "undefined") {
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  // The access token: from the URL `router serve` printed, then kept for the
  // tab, and taken off the address bar so it is not left in history.
  if (params.get("token")) {
    sessionStorage.setItem("router.token", params.get("token"));
    params.delete("token");
    history.replaceState(null, "", location.pathname + (params.toString() ? "?" + params : ""));
  }
  const token = sessionStorage.getItem("router.token");
  const outbox = new Outbox(localStorage);
  // The session shown: its id and the router that holds it (every request
  // for it names that router, so a "root" of another router is not mixed up).
  let current = params.get("session") ? { id: params.get("session"), router: params.get("router") || "" } : null;
  let messages = new Map();
  let streamAbort = null;
  let sessionsSeen = [];
  let skipped = [];

  const headers = (more) => ({ ...(token ? { authorization: "Bearer " + token } : {}), ...more });
  const isCurrent = (session) => current !== null && session.id === current.id && routerOf(session) === current.router;
  // The router that holds a session, by name; "" for the router serving this
  // page (its name changes when it restarts, and it serves its own first).
  const routerOf = (session) => {
    const router = session.router || {};
    if (!router.name || (typeof router.url === "string" && router.url.replace(/\/$/, "") === location.origin)) return "";
    return router.name;
  };
  // A session's route, naming its router when one is known.
  const sessionPath = (target, route) => "/sessions/" + encodeURIComponent(target.id) + "/" + route
    + (target.router ? "?router=" + encodeURIComponent(target.router) : "");
  const TOKEN_HELP = "open the URL `router serve` printed (it carries the access token)";
  async function call(method, path, body) {
    const response = await fetch(path, {
      method,
      headers: headers(body === undefined ? {} : { "content-type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let json = {};
    try { json = await response.json(); } catch (_) { json = {}; }
    if (response.status === 401) connection("refused", json.error + ": " + TOKEN_HELP);
    return { status: response.status, body: json };
  }

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "text") node.textContent = value;
      else if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value);
    }
    for (const child of children) if (child) node.appendChild(child);
    return node;
  }

  function build(nodes, parent) {
    for (const node of nodes) {
      if (node.tag === "#text") { parent.appendChild(document.createTextNode(node.text)); continue; }
      if (node.tag === "a" && !node.href) { parent.appendChild(document.createTextNode(node.text)); continue; }
      const element = document.createElement(node.tag);
      if (node.tag === "a") { element.href = node.href; element.rel = "noopener noreferrer"; element.target = "_blank"; }
      if (node.tag === "pre") { element.appendChild(el("code", { text: node.text })); if (node.lang) element.dataset.lang = node.lang; }
      else if (node.text !== undefined) element.textContent = node.text;
      if (node.children) build(node.children, element);
      parent.appendChild(element);
    }
    return parent;
  }

  function connection(state, detail) {
    const box = $("connection");
    box.dataset.state = state;
    box.textContent = detail ? state + ": " + detail : state;
  }

  // ---------------------------------------------------------------- board

  function renderBoard(list) {
    const body = $("board");
    body.replaceChildren();
    for (const session of list) {
      const state = stateOf(session);
      const row = el("tr", { class: isCurrent(session) ? "selected" : "",
                             onclick: () => select({ id: session.id, router: routerOf(session) }) },
        el("td", {}, document.createTextNode(session.id),
          routerOf(session) ? el("div", { class: "note", text: routerOf(session) }) : null),
        el("td", { text: session.kind || "" }),
        el("td", {}, el("span", { class: "state " + state, text: state })),
        el("td", { text: [session.harness, session.model].filter(Boolean).join(" · ") }),
        el("td", { text: session.cwd || "" }),
        el("td", { text: session.lastActivity ? new Date(session.lastActivity).toLocaleTimeString() : "" }));
      row.dataset.session = session.id;
      row.dataset.router = routerOf(session);
      row.title = routerOf(session) ? "held by " + routerOf(session) : "";
      body.appendChild(row);
    }
    $("skipped").textContent = skipped.length
      ? "not on the board: " + skipped.map((r) => r.router + " (" + r.error + ")").join(", ") : "";
  }

  function boardChanged() {
    renderBoard(sessionsSeen);
    if (!current && sessionsSeen.length) select({ id: sessionsSeen[0].id, router: routerOf(sessionsSeen[0]) });
    else updateHeader();
  }

  async function refreshBoard() {
    try {
      const { status, body } = await call("GET", "/sessions");
      if (status !== 200) { if (status !== 401) connection("refused", body.error + ": " + body.message); return; }
      sessionsSeen = body.sessions;
      skipped = body.skipped || [];
      boardChanged();
    } catch (_) {
      connection("offline", "the router does not answer; retrying");
    }
  }

  // The board, live: GET /board/live's snapshot and changes (a session
  // created anywhere appears without a reload); after a drop it is followed
  // again, and its snapshot is the whole board again.
  async function followBoard() {
    let pause = 500;
    for (;;) {
      try {
        const response = await fetch("/board/live", { headers: headers({ accept: "text/event-stream" }) });
        if (response.ok) {
          pause = 500;
          const parser = new SseParser((event) => {
            const data = JSON.parse(event.data);
            if (data.type === "routers-skipped") skipped = data.skipped || [];
            else if (data.type === "snapshot") { sessionsSeen = applyBoard(sessionsSeen, data); skipped = data.skipped || []; }
            else sessionsSeen = applyBoard(sessionsSeen, data);
            boardChanged();
          });
          const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            parser.feed(value);
          }
        } else if (response.status === 404) {
          return;  // a router without the board stream: the periodic list serves
        }
      } catch (_) {
        // the router is down; the send box keeps what is typed meanwhile
      }
      await new Promise((done) => setTimeout(done, pause));
      pause = Math.min(pause * 2, 8000);
      refreshBoard();
    }
  }

  // ---------------------------------------------------------------- one session

  function updateHeader() {
    const session = sessionsSeen.find(isCurrent);
    $("title").textContent = current ? current.id + (current.router ? " · " + current.router : "") : "no session";
    const state = session ? stateOf(session) : "";
    $("state").textContent = state;
    $("state").className = "state " + state;
    $("resume").hidden = state !== "stopped" && state !== "parked";
    $("resume").textContent = state === "parked" ? "resume now" : "resume";
    $("cancel-park").hidden = state !== "parked";
    if (state === "parked" && session.parked) notice(parkedText(session.parked));
    renderAsk(session && session.ask ? session.ask : null);
  }

  // A permission ask the session waits on (its board entry's ``ask``), with
  // Allow and Deny; the first answer anywhere wins, a late one is refused.
  let askShown = null;
  function renderAsk(ask) {
    const box = $("ask");
    if (!ask) { box.hidden = true; askShown = null; return; }
    if (askShown === ask.id) return;
    askShown = ask.id;
    const since = ask.since ? new Date(ask.since * 1000).toLocaleTimeString() : "";
    const answer = (decision) => async () => {
      const { status, body } = await call("POST", sessionPath(current, "asks/" + encodeURIComponent(ask.id)), { decision });
      $("outcome").textContent = status === 200 ? decision + ": " + ask.tool
        : "answer refused: " + (body.error || status) + ": " + (body.message || "");
      refreshBoard();
    };
    box.replaceChildren(
      el("div", { class: "ask-text" },
        el("strong", { text: "waiting on you: " + (ask.tool || "a tool") }),
        el("div", { text: ask.summary || "" }),
        el("div", { class: "note", text: since ? "since " + since : "" })),
      el("button", { type: "button", class: "allow", text: "Allow", onclick: answer("allow") }),
      el("button", { type: "button", class: "deny", text: "Deny", onclick: answer("deny") }));
    box.hidden = false;
  }

  function renderPart(part) {
    if (part.type === "text") return build(markdown(part.text), el("div", { class: "text" }));
    if (part.type === "reasoning") {
      return el("details", { class: "reasoning" }, el("summary", { text: "reasoning" }), el("div", { text: part.text }));
    }
    if (part.type === "tool") {
      const details = el("details", { class: "tool " + (part.state || "") },
        el("summary", { text: (part.toolName || "tool") + " · " + (part.state || "") }),
        el("div", { class: "label", text: "input" }),
        el("pre", { text: JSON.stringify(part.input, null, 2) }));
      if (part.output !== undefined) {
        details.appendChild(el("div", { class: "label", text: "output" }));
        details.appendChild(el("pre", { text: typeof part.output === "string" ? part.output : JSON.stringify(part.output, null, 2) }));
      }
      return details;
    }
    if (part.type === "image" && /^image\/(png|jpeg|gif|webp)$/.test(part.mediaType || "")) {
      return el("img", { class: "image", alt: "image", src: "data:" + part.mediaType + ";base64," + part.data });
    }
    return el("div", { class: "note", text: "[" + part.type + "]" });
  }

  function renderLog() {
    const log = $("log");
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
    log.replaceChildren();
    for (const message of messages.values()) {
      const box = el("div", { class: "msg " + message.role + (message.card ? " card" : "") });
      for (const part of message.parts || []) box.appendChild(renderPart(part));
      log.appendChild(box);
    }
    for (const pending of outbox.of(current ? current.id : null).filter((p) => (p.router || "") === (current ? current.router : ""))) {
      log.appendChild(el("div", { class: "msg user pending" },
        el("div", { text: pending.text }),
        el("div", { class: "note", text: pending.note || "sending…" })));
    }
    if (atBottom) log.scrollTop = log.scrollHeight;
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
    } else if (item.type === "turn-start") $("working").hidden = false;
    else if (item.type === "turn-end") $("working").hidden = true;
    else if (item.type === "session-stopped") notice("stopped: " + item.reason);
    else if (item.type === "session-resumed") notice(null);
    // A launched daemon's step (starting, replacing, unreachable ...): shown until it runs again.
    else if (item.type === "notice" && typeof item.code === "string" && item.code.startsWith("daemon-"))
      notice(item.state === "running" ? null : item.message);
    else if (item.type === "session-parked") notice(parkedText(item));
    else if (item.type === "session-unparked") notice(null);
  }

  function notice(text) {
    $("notice").hidden = !text;
    $("notice-text").textContent = text || "";
  }

  // The session's live view, over fetch so it carries the token and
  // Last-Event-ID; a dropped stream is followed again after a pause.
  async function follow(target) {
    if (streamAbort) streamAbort.abort();
    const abort = new AbortController();
    streamAbort = abort;
    messages = new Map();
    notice(null);
    renderLog();
    let lastId = null, pause = 500;
    while (!abort.signal.aborted && current === target) {
      try {
        connection("connecting");
        const response = await fetch(sessionPath(target, "live"), {
          headers: headers({ accept: "text/event-stream", ...(lastId ? { "last-event-id": lastId } : {}) }),
          signal: abort.signal,
        });
        if (!response.ok) {
          const body = await response.json().catch(() => ({}));
          connection("refused", (body.error || response.status) + ": " + (body.message || ""));
          if (response.status === 404) return;
        } else {
          connection("live");
          pause = 500;
          const parser = new SseParser((event) => {
            lastId = event.id;
            const data = JSON.parse(event.data);
            if (event.event === "snapshot" || data.type === "snapshot") {
              messages = new Map(data.messages.map((m) => [m.id, m]));
              $("working").hidden = !data.busy;
              notice(data.stopped ? "stopped: " + data.stopped.reason : data.parked ? parkedText(data.parked) : null);
            } else if (event.event === "lagged" || event.event === "reset") {
              lastId = null;
            } else if (event.event === "message") apply(data);
            renderLog();
          });
          const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            parser.feed(value);
          }
        }
      } catch (error) {
        if (abort.signal.aborted) return;
      }
      connection("reconnecting");
      await new Promise((done) => setTimeout(done, pause));
      pause = Math.min(pause * 2, 8000);
    }
  }

  function select(target) {
    current = target;
    const url = new URL(location.href);
    url.searchParams.set("session", target.id);
    if (target.router) url.searchParams.set("router", target.router); else url.searchParams.delete("router");
    history.replaceState(null, "", url.pathname + url.search);
    renderBoard(sessionsSeen);
    updateHeader();
    follow(target);
  }

  // ---------------------------------------------------------------- sending

  let flushing = false;
  async function flush() {
    if (flushing) return;
    flushing = true;
    try {
      for (const pending of outbox.all()) {
        let status = 0, body = {};
        try {
          ({ status, body } = await call("POST", sessionPath({ id: pending.session, router: pending.router || "" }, "messages"),
            { text: pending.text, eventId: pending.eventId }));
        } catch (_) {
          status = 0;
        }
        if (status === 404 && body.error === "unknown-router" && pending.router) {
          // The router that held it restarted under a new name: ask without
          // the name (its session is found by id), under the same event id.
          outbox.save(outbox.all().map((p) => (p.eventId === pending.eventId ? { ...p, router: "" } : p)));
          continue;
        }
        const outcome = outcomeText(status, body);
        if (outcome.final) {
          outbox.settle(pending.eventId);
          $("outcome").textContent = pending.text.slice(0, 40) + ": " + outcome.text;
        } else {
          outbox.tried(pending.eventId, outcome.text);
          if (status === 0) { connection("offline", "the router does not answer; your messages are kept"); break; }
        }
      }
    } finally {
      flushing = false;
      renderLog();
    }
  }

  $("send").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("text").value.replace(/\s+$/, "");
    if (!text || !current) return;
    $("text").value = "";
    outbox.add(current.id, text, crypto.randomUUID(), Date.now(), current.router);
    renderLog();
    flush();
  });
  $("stop").addEventListener("click", async () => {
    if (!current) return;
    const { status, body } = await call("POST", sessionPath(current, "abort"), {});
    $("outcome").textContent = status === 200 ? (body.aborted ? "stopped" : "nothing was running") : "stop refused: " + body.error + ": " + body.message;
  });
  $("resume").addEventListener("click", async () => {
    const { status, body } = await call("POST", sessionPath(current, "resume"), {});
    if (status !== 200) $("outcome").textContent = body.error + ": " + body.message;
    else if (body.was && body.was.parked) { $("outcome").textContent = "resumed: its kept messages go in now"; refreshBoard(); }
  });
  $("cancel-park").addEventListener("click", async () => {
    const { status, body } = await call("POST", sessionPath(current, "cancel-park"), {});
    $("outcome").textContent = status !== 200 ? body.error + ": " + body.message
      : body.cancelled ? "the park is cancelled; " + (body.dropped || []).length + " kept message(s) dropped: resend them"
      : "it was not parked";
    refreshBoard();
  });
  $("new").addEventListener("click", async () => {
    const { status, body } = await call("POST", "/sessions", {});
    if (status !== 201) { $("outcome").textContent = body.error + ": " + body.message; return; }
    await refreshBoard();
    select({ id: body.id, router: (body.router && body.router.name) || "" });
  });

  refreshBoard().then(() => { if (current && !streamAbort) select(current); });
  followBoard();
  setInterval(refreshBoard, 15000);  // a safety net beside the live board
  setInterval(() => { if (outbox.all().length) flush(); }, 2000);
  window.addEventListener("online", flush);
  flush();
}
