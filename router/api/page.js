// The router's page, as a phone app: the board of every session (the asks
// waiting on you first), one session's conversation, and a send box whose
// messages are never lost. Where the router sends notifications, the page
// subscribes this device to Web Push on request, reports whether it is seen
// (POST /presence), and shows a session's notifications with their receipts
// (docs/notifications.md, "On the phone").
//
// Served inline in page.html (router/api/page.py puts it there; the shell
// around it, the manifest, service worker and icons, is router/api/shell.py).
// The parts that decide something are plain functions on plain values,
// exported for node when there is no document (tests/api/test_page.py runs
// them):
//
//   SseParser             -> server-sent events from text chunks, with ids
//   Outbox                -> the pending sends, kept in a Storage object
//   outcomeText(status, body) -> what became of one send, in words
//   waitsOn(session, now) -> what a session waits on, in words
//   boardOrder(sessions)  -> the board's order: the sessions waiting on you first
//   ago(ms, now)          -> a last activity, in words
//   blockedText(code)     -> what a refused credential means, and what to do
//   pushText(state)       -> whether this device is notified, in a sentence
//   receiptText(receipt)  -> what became of one notification at one destination
//   keyBytes(base64url)   -> the router's VAPID public key as bytes (applicationServerKey)
//   sessionNotify(settings, id) -> a session's mute and "turn ended" opt-in
//
// Text from the server or a model is set with textContent, never parsed as
// HTML, with one exception: an answer's Markdown, which the server renders
// and sanitizes (POST /render: markdown-it-py, then nh3) and which the page
// parses in an inert document and copies through the same allow-list
// (sanitizedNodes), so an agent's <script> or onerror never runs.
"use strict";

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


// What a session waits on, in words, from its board entry.
function waitsOn(session, now) {
  const state = stateOf(session);
  if (session.ask) return "waiting on you: " + (session.ask.tool || "a tool") + (session.ask.summary ? " · " + session.ask.summary : "");
  if (state === "waiting") return "waiting on you";
  if (state === "working") return "working: the agent has the turn";
  if (state === "parked" && session.parked) return "waits for the provider's limit to reset at " +
    new Date(session.parked.resetsAt).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (state === "stopped") return "stopped" + (session.stopped && session.stopped.reason ? " (" + session.stopped.reason + ")" : "") + ": waits for a resume";
  if (state === "unreachable") return "unreachable: waits for its agent to come back";
  if (state === "closed") return "closed";
  return "idle: waits for a message";
}

// The board's order: sessions with an ask waiting on the person first, then
// the rest as the router listed them.
function boardOrder(sessions) {
  const waiting = (s) => (s.ask || stateOf(s) === "waiting" ? 0 : 1);
  return sessions.map((s, i) => [waiting(s), i, s]).sort((a, b) => a[0] - b[0] || a[1] - b[1]).map((x) => x[2]);
}

// A time (ms since the epoch) as "now", "5 min ago", "3 h ago", or a date.
function ago(ms, now) {
  if (typeof ms !== "number") return "";
  const seconds = Math.max(0, Math.round((now - ms) / 1000));
  if (seconds < 45) return "now";
  if (seconds < 3600) return Math.round(seconds / 60) + " min ago";
  if (seconds < 86400) return Math.round(seconds / 3600) + " h ago";
  return new Date(ms).toLocaleDateString();
}

// A 401 from the API (`no-token`, `bad-token`, or a revoked device's code)
// in words, with what the person can do.
function blockedText(code) {
  if (code === "no-token") return "This page has no access key. Open the URL `router serve` printed (it carries the key), " +
    "or pair this device from a page that is signed in.";
  return "The router refused this page's access key (" + (code || "refused") + "): it was revoked or replaced. " +
    "Open the URL `router serve` printed again, or pair this device again.";
}

// ------------------------------------------------------------------ notifications

// Whether this device is notified, in a sentence a person can act on. `state`
// is {state, detail?, device?}; docs/notifications.md, "On the phone".
function pushText(push) {
  const detail = push.detail ? " (" + push.detail + ")" : "";
  switch (push.state) {
    case "on": return "On: asks and session news come to this device" + (push.device ? " as “" + push.device + "”" : "") + ".";
    case "off": return "Off: this device gets no notifications." + (push.detail ? " " + push.detail + "." : "");
    // The router's own sentence says how to switch it on; the page says where.
    case "notifier-off": return "Unavailable where the router runs: " +
      (push.detail && push.detail !== "notifier-off" ? push.detail : "its web-push notifier is off") + ".";
    case "denied": return "Blocked: this browser denies notifications to this page; allow them in its site settings, then try again.";
    case "no-push-service": return "Unavailable: this browser has no push service to subscribe with" + detail + ".";
    case "unsupported": return "Unavailable: this browser has no Web Push here" + (push.detail ? detail : " (on an iPhone, add the page to the home screen first)") + ".";
    case "insecure": return "Unavailable: notifications need the page over HTTPS (router serve --listen) or on localhost.";
    case "working": return "One moment…";
    case "error": return "Not done: " + (push.detail || "the router refused") + ".";
    default: return "Checking whether this device can be notified…";
  }
}

// One receipt of GET /notifications: where, what became of it, and why.
function receiptText(receipt) {
  const r = receipt || {};
  const why = [r.outcome === "sent" && r.status ? String(r.status) : "", r.detail || r.code || ""].filter(Boolean).join(", ");
  return (r.destination || "?") + ": " + (r.outcome || "?") + (why ? " (" + why + ")" : "");
}

// A VAPID public key (base64url, no padding) as the bytes the Push API takes.
function keyBytes(text) {
  const base64 = String(text).replace(/-/g, "+").replace(/_/g, "/");
  const binary = atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

// A session's notification setting: {muted, turnEnded}, from GET
// /notifications/settings ({turn_ended, sessions: {id: {muted, turn_ended}}})
// or a POST /sessions/<id>/notify answer ({session, muted, turn_ended}).
function sessionNotify(settings, id) {
  const s = settings || {};
  const own = s.session === id ? s : (s.sessions && typeof s.sessions === "object" && s.sessions[id]) || null;
  return own ? { muted: own.muted === true, turnEnded: own.turn_ended === true }
    : { muted: false, turnEnded: s.turn_ended === true };
}

if (typeof module !== "undefined") {
  module.exports = { SseParser, Outbox, outcomeText, parkedText, stateOf, keyOf, applyBoard, waitsOn, boardOrder, ago,
    blockedText, pushText, receiptText, keyBytes, sessionNotify, OUTBOX_KEY };
}

// ------------------------------------------------------------------ the page

if (typeof document !== "undefined") {
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  // The access token: from the URL `router serve` printed (or a pairing's),
  // then kept in this browser (an installed app opens at "/" without it),
  // and taken off the address bar so it is not left in history.
  const TOKEN_KEY = "router.token";
  if (params.get("token")) {
    localStorage.setItem(TOKEN_KEY, params.get("token"));
    params.delete("token");
    history.replaceState(null, "", location.pathname + (params.toString() ? "?" + params : ""));
  }
  const token = localStorage.getItem(TOKEN_KEY);
  const outbox = new Outbox(localStorage);
  const BOARD_KEY = "router.board";
  // The session shown: its id and the router that holds it (every request
  // for it names that router, so a "root" of another router is not mixed up).
  let current = params.get("session") ? { id: params.get("session"), router: params.get("router") || "" } : null;
  let messages = new Map();
  let liveBusy = null;           // the live view's busy, when it has said (null: ask the board)
  let streamAbort = null;
  let sessionsSeen = [];
  let skipped = [];
  let blocked = false;
  let boardLoaded = false;      // the router answered the board once
  const features = {};           // the optional routes this router has (a 404 hides a feature)
  const outcomes = new Map();    // eventId -> what became of that send, in words
  const rendered = new Map();    // Markdown text -> sanitized HTML from POST /render
  const wantRender = new Set();
  const coarse = matchMedia("(pointer: coarse)");
  const wide = matchMedia("(min-width: 760px)");

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
  async function call(method, path, body) {
    const response = await fetch(path, {
      method,
      headers: headers(body === undefined ? {} : { "content-type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let json = {};
    try { json = await response.json(); } catch (_) { json = {}; }
    if (response.status === 401) block(json.error || (token ? "bad-token" : "no-token"));
    return { status: response.status, body: json };
  }
  const say = (text) => { $("outcome").textContent = text; };
  const refusedText = (status, body) => (body.error || status) + ": " + (body.message || "");

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

  function connection(state, detail) {
    const box = $("connection");
    box.dataset.state = state;
    box.textContent = detail ? state + ": " + detail : state;
    box.title = box.textContent;
    // The session view says it too when the link is not live (on a phone the board is out of sight).
    $("link").hidden = state === "live" || state === "connecting";
    $("link").textContent = state === "refused" ? "refused" : state;
  }

  // A missing or refused credential blocks the page with what to do (not an
  // empty board that looks like "no sessions").
  function block(code) {
    blocked = true;
    $("blocked-text").textContent = blockedText(code);
    $("blocked-code").textContent = "the router answered 401 " + code;
    $("blocked").hidden = false;
    connection("refused", code);
  }
  $("blocked-retry").addEventListener("click", () => location.reload());

  // ---------------------------------------------------------------- views

  // On a phone one view at a time (the board, or a session); side by side
  // when the window is wide. The phone's back button returns to the board.
  function show(view) {
    const was = $("app").dataset.view;
    $("app").dataset.view = view;
    if (view === "session") stickToBottom();
    if (was !== view) presence();
  }
  $("back").addEventListener("click", () => {
    if (history.state && history.state.session) history.back(); else show("board");
  });
  window.addEventListener("popstate", () => show(history.state && history.state.session ? "session" : "board"));

  // ---------------------------------------------------------------- board

  function askBox(session, ask, box) {
    const target = { id: session.id, router: routerOf(session) };
    const answer = (decision) => async (event) => {
      event.stopPropagation();
      for (const button of box.querySelectorAll("button")) button.disabled = true;
      const { status, body } = await call("POST", sessionPath(target, "asks/" + encodeURIComponent(ask.id)), { decision });
      say(status === 200 ? decision + ": " + (ask.tool || "the tool") : "answer refused: " + refusedText(status, body));
      refreshBoard();
    };
    const since = ask.since ? new Date(ask.since * 1000).toLocaleTimeString() : "";
    box.replaceChildren(
      el("div", { class: "what" }, el("strong", { text: (ask.tool || "a tool") + " asks to run" }),
        document.createTextNode(" in " + session.id + (since ? " · since " + since : ""))),
      el("div", { class: "summary", text: ask.summary || "" }),
      el("div", { class: "actions" },
        el("button", { type: "button", class: "deny", text: "Deny", onclick: answer("deny") }),
        el("button", { type: "button", class: "allow", text: "Allow", onclick: answer("allow") })));
    box.dataset.ask = ask.id;
    return box;
  }

  // The board's rows by board key (keyOf): the session each was drawn
  // from and what it showed, so a render redraws only the rows whose
  // session (or its "5 min ago", or the selection) changed, and moves
  // nodes only when the order did: a thousand rows redrawn on every change
  // cost the page its paint (bench/board_scale.py).
  const boardRows = new Map();

  function boardRow(session, now) {
    const state = stateOf(session);
    const key = keyOf(session);
    const selected = isCurrent(session);
    const waits = waitsOn(session, now);
    const when = ago(session.lastActivity, now);
    const kept = boardRows.get(key);
    if (kept && kept.selected === selected && kept.waits === waits && kept.when === when &&
        (kept.session === session || kept.json === JSON.stringify(session))) {
      kept.session = session;
      return kept.item;
    }
    const meta = [...new Set([session.project && session.project + (session.branch ? " @ " + session.branch : ""),
      session.kind, session.harness, session.model, routerOf(session) && "held by " + routerOf(session),
      session.cwd].filter(Boolean))].join(" · ");
    const item = el("li", { class: selected ? "selected" : "" },
      el("button", { type: "button", onclick: () => select({ id: session.id, router: routerOf(session) }, true) },
        el("span", { class: "name", text: session.id }),
        el("span", { class: "state " + state, text: state }),
        el("span", { class: "waits", text: waits }),
        el("span", { class: "meta", text: meta }),
        el("span", { class: "when", text: when })));
    item.dataset.session = session.id;
    item.dataset.router = routerOf(session);
    item.dataset.state = state;
    item.dataset.lastActivity = typeof session.lastActivity === "number" ? String(session.lastActivity) : "";
    boardRows.set(key, { item, session, json: JSON.stringify(session), selected, waits, when });
    return item;
  }

  function renderBoard() {
    const now = Date.now();
    const ordered = boardOrder(sessionsSeen);
    const asks = ordered.filter((s) => s.ask);
    if (asks.length || $("asks").childElementCount) {
      $("asks").replaceChildren(...asks.map((s) => askBox(s, s.ask, el("div", { class: "ask" }))));
    }
    const board = $("board");
    const wanted = ordered.map((session) => boardRow(session, now));
    const keep = new Set(wanted);
    for (const [key, row] of boardRows) if (!keep.has(row.item)) boardRows.delete(key);
    let at = board.firstChild;
    for (const item of wanted) {  // in place: a row that is where it belongs is not touched
      if (at === item) { at = at.nextSibling; continue; }
      board.insertBefore(item, at);
    }
    while (at) { const next = at.nextSibling; board.removeChild(at); at = next; }
    $("empty").hidden = !boardLoaded || sessionsSeen.length > 0;
    $("empty").textContent = "No sessions yet: start one with “new session”.";
    $("skipped").textContent = skipped.length
      ? "not on the board: " + skipped.map((r) => r.router + " (" + (r.error || r.code) + ")").join(", ") : "";
  }

  // The board kept for the next load (shown before the router answers):
  // written at most once a second, not on every change (a thousand
  // sessions are half a megabyte of JSON).
  let boardSaved = 0;
  let boardSaving = null;
  function saveBoard() {
    if (boardSaving !== null) return;
    boardSaving = setTimeout(() => {
      boardSaving = null;
      boardSaved = Date.now();
      try { localStorage.setItem(BOARD_KEY, JSON.stringify(sessionsSeen)); } catch (_) { /* full: the board is only a convenience */ }
    }, Math.max(0, boardSaved + 1000 - Date.now()));
  }

  function boardChanged() {
    saveBoard();
    renderBoard();
    if (!current && sessionsSeen.length && wide.matches) select({ id: sessionsSeen[0].id, router: routerOf(sessionsSeen[0]) });
    else if (current && !sessionsSeen.some(isCurrent)) {
      // The open session is listed under another router than the one the
      // view names (a session just made here, then held by its own
      // router: a Claude Code session's `router mcp`): follow it there.
      const listed = sessionsSeen.filter((session) => session.id === current.id);
      if (listed.length === 1) select({ id: current.id, router: routerOf(listed[0]) });
      else updateHeader();
    } else updateHeader();
  }

  async function refreshBoard() {
    if (blocked) return;
    try {
      const { status, body } = await call("GET", "/sessions");
      if (status !== 200) { if (status !== 401) connection("refused", refusedText(status, body)); return; }
      if ($("connection").dataset.state === "offline") connection("live");
      sessionsSeen = body.sessions;
      skipped = body.skipped || [];
      boardLoaded = true;
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
    while (!blocked) {
      try {
        const response = await fetch("/board/live", { headers: headers({ accept: "text/event-stream" }) });
        if (response.ok) {
          pause = 500;
          if (!current) connection("live");
          let changed = false;  // the events of one read are drawn once, not once each
          const parser = new SseParser((event) => {
            const data = JSON.parse(event.data);
            if (data.type === "routers-skipped") skipped = data.skipped || [];
            else if (data.type === "snapshot") { sessionsSeen = applyBoard(sessionsSeen, data); skipped = data.skipped || []; boardLoaded = true; }
            else sessionsSeen = applyBoard(sessionsSeen, data);
            changed = true;
          });
          const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            parser.feed(value);
            if (changed) { changed = false; boardChanged(); }
          }
        } else if (response.status === 401) {
          block((await response.json().catch(() => ({}))).error || "bad-token");
          return;
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
    let state = session ? stateOf(session) : "";
    // The live view knows a turn's end before the board's next survey (about a second).
    if (liveBusy !== null && (state === "working" || state === "idle")) state = liveBusy ? "working" : "idle";
    $("state").textContent = state;
    $("state").className = "state " + state;
    $("resume").hidden = state !== "stopped" && state !== "parked";
    $("resume").textContent = state === "parked" ? "resume now" : "resume";
    $("cancel-park").hidden = state !== "parked";
    if (state === "parked" && session.parked) notice(parkedText(session.parked));
    const ask = session && session.ask ? session.ask : null;
    if (!ask) { $("ask").hidden = true; delete $("ask").dataset.ask; }
    else if ($("ask").dataset.ask !== ask.id) { askBox(session, ask, $("ask")); $("ask").hidden = false; }
    // A session in a git worktree (its board entry names it) shows its changes and can be ended.
    const placed = Boolean(session && session.worktree);
    $("changes").hidden = !(placed && features.diff);
    $("end").hidden = !(placed && features.end);
  }

  // An answer's Markdown: the sanitized HTML the server rendered, parsed in
  // an inert document (no script runs, nothing loads) and copied element by
  // element through an allow-list, attributes too. Until it is rendered (or
  // when the router is away) the text is shown as it is.
  const ALLOWED = new Set(["P", "BR", "HR", "H1", "H2", "H3", "H4", "H5", "H6", "STRONG", "EM", "DEL", "S", "CODE", "PRE",
    "BLOCKQUOTE", "UL", "OL", "LI", "A", "TABLE", "THEAD", "TBODY", "TR", "TH", "TD"]);
  function sanitizedNodes(source, parent) {
    for (const node of source.childNodes) {
      if (node.nodeType === Node.TEXT_NODE) { parent.appendChild(document.createTextNode(node.data)); continue; }
      if (node.nodeType !== Node.ELEMENT_NODE) continue;
      if (!ALLOWED.has(node.tagName)) { sanitizedNodes(node, parent); continue; }
      const copy = document.createElement(node.tagName.toLowerCase());
      if (node.tagName === "A" && /^(https?:|mailto:)/i.test(node.getAttribute("href") || "")) {
        copy.href = node.getAttribute("href"); copy.rel = "noopener noreferrer"; copy.target = "_blank";
      }
      if (node.tagName === "OL" && /^\d+$/.test(node.getAttribute("start") || "")) copy.setAttribute("start", node.getAttribute("start"));
      if (node.tagName === "CODE" && /^language-[\w+-]+$/.test(node.getAttribute("class") || "")) copy.className = node.getAttribute("class");
      sanitizedNodes(node, copy);
      parent.appendChild(copy);
    }
    return parent;
  }
  const parser = new DOMParser();
  function markdownBox(text) {
    const html = rendered.get(text);
    if (html === undefined) {
      wantRender.add(text);
      scheduleRender();
      return el("div", { class: "text", text });
    }
    return sanitizedNodes(parser.parseFromString(html, "text/html").body, el("div", { class: "text html" }));
  }
  let renderTimer = null, rendering = false;
  function scheduleRender() {
    if (renderTimer === null && !rendering) renderTimer = setTimeout(renderNow, 120);
  }
  async function renderNow() {
    renderTimer = null;
    // Only what is shown now: a streamed answer's earlier, shorter texts are not.
    const shown = new Set();
    for (const message of messages.values()) for (const part of message.parts || []) if (part.type === "text") shown.add(part.text);
    for (const text of wantRender) if (!shown.has(text)) wantRender.delete(text);
    const texts = [...wantRender].slice(0, 64);
    if (!texts.length || blocked) return;
    rendering = true;
    try {
      const { status, body } = await call("POST", "/render", { texts });
      if (status === 200 && Array.isArray(body.html)) {
        texts.forEach((text, i) => { rendered.set(text, body.html[i]); wantRender.delete(text); });
        while (rendered.size > 2000) rendered.delete(rendered.keys().next().value);
        renderLog();
      } else if (status === 404) {
        texts.forEach((text) => wantRender.delete(text));  // a router without the route: text as it is
      }
    } catch (_) {
      // the router is away: the text stays as it is, and is asked again later
    } finally {
      rendering = false;
      if (wantRender.size) renderTimer = setTimeout(renderNow, 1500);
    }
  }

  function renderPart(part, role) {
    if (part.type === "text") return role === "assistant" ? markdownBox(part.text) : el("div", { class: "text", text: part.text });
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

  // The conversation scrolls in its own panel and follows the newest
  // message, unless the person scrolled up: then a pill says new messages
  // came, and takes them down to them.
  let following = true;
  const log = $("log");
  const nearBottom = () => log.scrollHeight - log.scrollTop - log.clientHeight < 48;
  function stickToBottom() {
    following = true;
    $("pill").hidden = true;
    log.scrollTop = log.scrollHeight;
  }
  log.addEventListener("scroll", () => {
    following = nearBottom();
    if (following) $("pill").hidden = true;
  }, { passive: true });
  $("pill").addEventListener("click", stickToBottom);

  const boxes = new Map();  // message id -> {message, note, html, node}: a message is rebuilt only when it changed
  let shownCount = 0, lastShown = null;
  function renderLog() {
    const wasFollowing = following;
    const nodes = [];
    const seen = new Set();
    for (const message of messages.values()) {
      seen.add(message.id);
      const note = message.role !== "user" ? "" : outcomes.get(message.id) || outcomes.get(message.operationId) || "";
      const texts = (message.parts || []).filter((p) => p.type === "text").map((p) => rendered.has(p.text) ? 1 : 0).join("");
      let box = boxes.get(message.id);
      if (!box || box.message !== message || box.note !== note || box.texts !== texts) {
        const node = el("div", { class: "msg " + message.role + (message.card ? " card" : "") });
        node.dataset.id = message.id;
        for (const part of message.parts || []) node.appendChild(renderPart(part, message.role));
        if (note) node.appendChild(el("div", { class: "note", text: note }));
        box = { message, note, texts, node };
        boxes.set(message.id, box);
      }
      nodes.push(box.node);
    }
    for (const id of boxes.keys()) if (!seen.has(id)) boxes.delete(id);
    const mine = current ? outbox.of(current.id).filter((p) => (p.router || "") === current.router) : [];
    for (const pending of mine) {
      if (seen.has(pending.eventId)) continue;  // the router has it: its answer is on its way
      nodes.push(el("div", { class: "msg user pending" },
        el("div", { class: "text", text: pending.text }),
        el("div", { class: "note", text: pending.note || "sending…" })));
    }
    // New: more messages, or the last one changed (a delta); a render of
    // Markdown already shown is not news.
    const last = [...messages.values()].pop() || null;
    const grew = nodes.length > shownCount || last !== lastShown;
    shownCount = nodes.length;
    lastShown = last;
    const top = log.scrollTop;
    log.replaceChildren(...nodes);
    if (wasFollowing) log.scrollTop = log.scrollHeight;
    else {
      log.scrollTop = top;  // emptied for a moment, the panel would be back at the top
      if (grew) $("pill").hidden = false;
    }
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
    } else if (item.type === "turn-start") { $("working").hidden = false; liveBusy = true; updateHeader(); }
    else if (item.type === "turn-end") { $("working").hidden = true; liveBusy = false; updateHeader(); }
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
    liveBusy = null;
    notice(null);
    renderLog();
    let lastId = null, pause = 500;
    while (!abort.signal.aborted && current === target && !blocked) {
      try {
        connection("connecting");
        const response = await fetch(sessionPath(target, "live"), {
          headers: headers({ accept: "text/event-stream", ...(lastId ? { "last-event-id": lastId } : {}) }),
          signal: abort.signal,
        });
        if (!response.ok) {
          const body = await response.json().catch(() => ({}));
          if (response.status === 401) { block(body.error || "bad-token"); return; }
          // A 404 is followed again too, after the pause: a session just
          // made (a Claude Code one) is on the board once its agent joins.
          connection("refused", refusedText(response.status, body));
        } else {
          connection("live");
          pause = 500;
          const sse = new SseParser((event) => {
            lastId = event.id;
            const data = JSON.parse(event.data);
            if (event.event === "snapshot" || data.type === "snapshot") {
              messages = new Map(data.messages.map((m) => [m.id, m]));
              $("working").hidden = !data.busy;
              liveBusy = !!data.busy;
              updateHeader();
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
            sse.feed(value);
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

  function select(target, opened) {
    const same = current && current.id === target.id && current.router === target.router && streamAbort;
    current = target;
    const url = new URL(location.href);
    url.searchParams.set("session", target.id);
    if (target.router) url.searchParams.set("router", target.router); else url.searchParams.delete("router");
    // On a phone, opening a session is a step the back button undoes.
    if (opened && !wide.matches) history.pushState({ session: target.id }, "", url.pathname + url.search);
    else history.replaceState(history.state, "", url.pathname + url.search);
    if (opened) show("session");
    renderBoard();
    updateHeader();
    if (!same) { following = true; $("pill").hidden = true; shownCount = 0; follow(target); presence(); loadAlerts(); }
  }

  // ---------------------------------------------------------------- sending

  let flushing = false;
  async function flush() {
    if (flushing || blocked) return;
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
        if (status === 401) break;
        if (status === 404 && body.error === "unknown-router" && pending.router) {
          // The router that held it restarted under a new name: ask without
          // the name (its session is found by id), under the same event id.
          outbox.save(outbox.all().map((p) => (p.eventId === pending.eventId ? { ...p, router: "" } : p)));
          continue;
        }
        // The router answered: a link marked offline by an earlier try is live again.
        if (status !== 0 && $("connection").dataset.state === "offline") connection("live");
        const outcome = outcomeText(status, body);
        if (outcome.final) {
          outbox.settle(pending.eventId);
          outcomes.set(pending.eventId, outcome.text);
          // A container session's user message is its operation's ("<operationId>:user").
          if (typeof body.operationId === "string") outcomes.set(body.operationId, outcome.text);
          say(pending.text.slice(0, 40) + ": " + outcome.text);
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

  function submit() {
    const text = $("text").value.replace(/\s+$/, "");
    if (!text || !current) return;
    $("text").value = "";
    grow();
    outbox.add(current.id, text, crypto.randomUUID(), Date.now(), current.router);
    stickToBottom();
    renderLog();
    flush();
  }
  $("send").addEventListener("submit", (event) => { event.preventDefault(); submit(); });
  // Enter sends on a keyboard; on a touch screen Enter is a new line and the
  // send button sends. Shift+Enter is always a new line.
  $("text").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing && !coarse.matches) { event.preventDefault(); submit(); }
  });
  function grow() {
    const box = $("text");
    box.style.height = "auto";
    box.style.height = Math.min(box.scrollHeight + 2, innerHeight * 0.38) + "px";
  }
  $("text").addEventListener("input", grow);

  $("stop").addEventListener("click", async () => {
    if (!current) return;
    const { status, body } = await call("POST", sessionPath(current, "abort"), {});
    say(status === 200 ? (body.aborted ? "stopped" : "nothing was running") : "stop refused: " + refusedText(status, body));
  });
  $("resume").addEventListener("click", async () => {
    const { status, body } = await call("POST", sessionPath(current, "resume"), {});
    if (status !== 200) say(refusedText(status, body));
    else if (body.was && body.was.parked) { say("resumed: its kept messages go in now"); refreshBoard(); }
  });
  $("cancel-park").addEventListener("click", async () => {
    const { status, body } = await call("POST", sessionPath(current, "cancel-park"), {});
    say(status !== 200 ? refusedText(status, body)
      : body.cancelled ? "the park is cancelled; " + (body.dropped || []).length + " kept message(s) dropped: resend them"
      : "it was not parked");
    refreshBoard();
  });

  // ---------------------------------------------------------------- other engineers' routes, when present

  // A sheet (a modal dialog) with a title and what to show.
  function sheet(title, ...children) {
    $("sheet-title").textContent = title;
    $("sheet-body").replaceChildren(...children);
    if (!$("sheet").open) $("sheet").showModal();
  }
  $("sheet-close").addEventListener("click", () => $("sheet").close());
  const field = (label, input) => el("label", {}, document.createTextNode(label), input);

  // Which optional routes answer: a 404 (no such route) hides the feature.
  async function probe() {
    const has = async (method, path) => {
      try {
        const response = await fetch(path, { method, headers: headers() });
        return response.status !== 404 && response.status !== 405;
      } catch (_) { return false; }
    };
    // The devices list answers only where pairing is on and on this
    // machine (a paired phone is refused `local-only`): it stands for both.
    const ok = async (path) => { try { return (await fetch(path, { headers: headers() })).ok; } catch (_) { return false; } };
    [features.devices, features.projects, features.diff, features.end] = await Promise.all([
      ok("/devices"), ok("/projects"), has("OPTIONS", "/sessions/probe/diff"), has("OPTIONS", "/sessions/probe/end")]);
    features.pair = features.devices;
    // Notifications: a 404 is a router without them; 409 `notifier-off` has the routes, switched off.
    try {
      const vapid = await fetch("/notifications/vapid", { headers: headers() });
      features.notify = vapid.status !== 404 && vapid.status !== 405 && vapid.status !== 401;
      features.notifyOff = vapid.status === 409 ? ((await vapid.json().catch(() => ({}))).message || "notifier-off") : null;
    } catch (_) { features.notify = false; }
    $("pair").hidden = !features.pair;
    $("devices").hidden = !features.devices;
    updateHeader();
  }

  $("new").addEventListener("click", async () => {
    if (!features.projects) {
      const { status, body } = await call("POST", "/sessions", {});
      if (status !== 201) { say(refusedText(status, body)); return; }
      await refreshBoard();
      select({ id: body.id, router: (body.router && body.router.name) || "" }, true);
      return;
    }
    const { status, body } = await call("GET", "/projects");
    if (status !== 200) { say(refusedText(status, body)); return; }
    const project = el("select", { name: "project" }, ...(body.projects || []).map((p) => el("option", { value: p.name, text: p.name + " · " + p.path })));
    const inputs = { name: el("input", { name: "name" }), branch: el("input", { name: "branch" }),
      harness: el("input", { name: "harness" }), where: el("input", { name: "where", placeholder: "local" }),
      prompt: el("textarea", { name: "prompt", rows: "3" }) };
    const create = el("button", { type: "button", class: "primary", text: "start", onclick: async () => {
      const request = { project: project.value };
      for (const [key, input] of Object.entries(inputs)) if (input.value.trim()) request[key] = input.value.trim();
      const answer = await call("POST", "/sessions", request);
      if (answer.status !== 201) { result.textContent = refusedText(answer.status, answer.body); return; }
      $("sheet").close();
      await refreshBoard();
      select({ id: answer.body.session || answer.body.id, router: (answer.body.router && answer.body.router.name) || "" }, true);
    } });
    const result = el("div", { class: "note" });
    sheet("new session", field("project", project), field("name (optional)", inputs.name), field("branch (optional)", inputs.branch),
      field("harness (optional)", inputs.harness), field("where: local or container (optional)", inputs.where),
      field("first message (optional)", inputs.prompt), create, result);
  });

  $("pair").addEventListener("click", async () => {
    const { status, body } = await call("POST", "/pairings", {});
    if (status !== 200 && status !== 201) { say("pairing refused: " + refusedText(status, body)); return; }
    const expires = body.expiresAt ? new Date(body.expiresAt).toLocaleTimeString() : "";
    sheet("pair a phone",
      el("p", { text: "Scan this with the phone's camera, or open the address on it" + (expires ? "; it works until " + expires : "") + "." }),
      // The QR code as an image: an SVG in an <img> runs nothing.
      typeof body.qrSvg === "string" ? el("img", { class: "qr", alt: "QR code of the pairing address",
        src: "data:image/svg+xml;charset=utf-8," + encodeURIComponent(body.qrSvg) }) : null,
      el("div", { class: "row" }, el("code", { class: "grow", text: body.url || "" })),
      body.code ? el("p", {}, document.createTextNode("code: "), el("strong", { text: body.code })) : null);
  });

  async function showDevices() {
    const { status, body } = await call("GET", "/devices");
    if (status !== 200) { say(refusedText(status, body)); return; }
    const when = (ms) => (ms ? new Date(ms).toLocaleString() : "never");
    const rows = (body.devices || []).map((device) => el("div", { class: "row" },
      el("div", { class: "grow" }, el("strong", { text: device.name }),
        el("div", { class: "note", text: "first used " + when(device.firstUse) + " · last used " + when(device.lastUse) })),
      el("button", { type: "button", class: "deny", text: "revoke", onclick: async () => {
        const answer = await call("POST", "/devices/" + encodeURIComponent(device.name) + "/revoke", {});
        say(answer.status === 200 ? device.name + " revoked" : "revoke refused: " + refusedText(answer.status, answer.body));
        showDevices();
      } })));
    sheet("devices", ...(rows.length ? rows : [el("p", { class: "note", text: "No paired devices." })]));
  }
  $("devices").addEventListener("click", showDevices);

  $("changes").addEventListener("click", async () => {
    const { status, body } = await call("GET", sessionPath(current, "diff"));
    if (status !== 200) { say(refusedText(status, body)); return; }
    sheet("changes on " + (body.branch || "its branch"),
      el("div", { class: "note", text: "since " + (body.base || "its base") }),
      ...(body.commits || []).map((c) => el("div", {}, el("code", { text: String(c.sha).slice(0, 8) }), document.createTextNode(" " + c.subject))),
      ...(body.files || []).map((f) => el("details", {},
        el("summary", { text: f.path + "  +" + f.added + " −" + f.removed }), el("pre", { text: f.patch || "" }))));
  });

  $("end").addEventListener("click", () => {
    const target = current;
    const place = sessionsSeen.find(isCurrent) || {};
    const keep = el("input", { type: "checkbox" });
    const result = el("div", { class: "note" });
    const end = async (force) => {
      const { status, body } = await call("POST", sessionPath(target, "end"), { keepWorktree: keep.checked, force });
      if (status === 409) {
        // The router's sentence says what would be lost (uncommitted files, commits on no other branch).
        result.replaceChildren(el("p", {}, el("strong", { text: "Not ended: " }), document.createTextNode(body.message || body.error)),
          el("button", { type: "button", class: "deny", text: "end anyway", onclick: () => end(true) }));
        return;
      }
      if (status !== 200) { result.textContent = refusedText(status, body); return; }
      $("sheet").close();
      say(target.id + " ended" + (body.worktreeRemoved ? "; its worktree removed" : "; its worktree kept") +
        (body.branchRemoved ? "; its branch removed" : ""));
      refreshBoard();
    };
    sheet("end " + target.id,
      el("p", { text: "Ending stops the session's agent and removes its worktree" +
        (place.worktree ? " (" + place.worktree + ")" : "") + (place.branch ? " and its branch " + place.branch : "") +
        ", unless you keep the worktree. The router refuses when work would be lost, and says what. Its transcript stays." }),
      el("label", { class: "row" }, keep, document.createTextNode(" keep the worktree")),
      el("div", { class: "row" }, el("button", { type: "button", class: "deny", text: "end the session", onclick: () => end(false) })),
      result);
  });

  // ---------------------------------------------------------------- notifications

  // This device's Web Push subscription (docs/notifications.md, "On the
  // phone"): asked for only when the person taps the control; the router's
  // VAPID key, the browser's subscription, then POST /notifications/subscriptions.
  const PUSH_KEY = "router.push";  // {id, endpoint, device}: the subscription as the router knows it
  const SUBSCRIBE_SECONDS = 10;
  const worker = "serviceWorker" in navigator
    ? navigator.serviceWorker.register("/sw.js").catch(() => null)  // http on a LAN name: no worker
    : Promise.resolve(null);
  let push = { state: "checking" };
  function showPush(state) {
    push = state;
    $("notify").hidden = !features.notify;
    $("notify").dataset.state = state.state;
    $("notify-state").textContent = pushText(state);
    $("notify-toggle").textContent = state.state === "on" ? "Stop notifying this device" : "Notify me on this device";
    $("notify-toggle").disabled = !["on", "off", "denied", "error", "no-push-service"].includes(state.state);
  }
  const keptPush = () => { try { return JSON.parse(localStorage.getItem(PUSH_KEY) || "null"); } catch (_) { return null; } };
  // What stands in the way of Web Push here, before any subscription.
  function pushBlocker() {
    if (!window.isSecureContext) return { state: "insecure" };
    if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) return { state: "unsupported" };
    if (features.notifyOff) return { state: "notifier-off", detail: features.notifyOff };
    if (Notification.permission === "denied") return { state: "denied" };
    return null;
  }
  async function activeWorker() {
    if (!(await worker)) return null;
    return navigator.serviceWorker.ready;
  }
  // The subscription told to the router (again: the same endpoint replaces its old entry).
  async function announce(subscription) {
    const { status, body } = await call("POST", "/notifications/subscriptions", subscription.toJSON());
    if (status !== 201 && status !== 200) { showPush({ state: "error", detail: refusedText(status, body) }); return; }
    localStorage.setItem(PUSH_KEY, JSON.stringify({ id: body.id, endpoint: subscription.endpoint, device: body.device }));
    showPush({ state: "on", device: body.device });
  }
  async function checkPush() {
    if (!features.notify) { showPush({ state: "absent" }); return; }
    const blocker = pushBlocker();
    if (blocker) { showPush(blocker); return; }
    const registration = await worker;
    if (!registration) { showPush({ state: "unsupported", detail: "the service worker did not start" }); return; }
    const subscription = await registration.pushManager.getSubscription().catch(() => null);
    if (!subscription || Notification.permission !== "granted") { showPush({ state: "off" }); return; }
    await announce(subscription);
  }
  async function pushOn() {
    const blocker = pushBlocker();
    if (blocker) { showPush(blocker); return; }
    showPush({ state: "working" });
    const permission = await Notification.requestPermission();
    if (permission !== "granted") { showPush(permission === "denied" ? { state: "denied" } : { state: "off", detail: "The permission was not given" }); return; }
    const { status, body } = await call("GET", "/notifications/vapid");
    if (status === 409) { features.notifyOff = body.message || body.error; showPush({ state: "notifier-off", detail: features.notifyOff }); return; }
    if (status !== 200 || typeof body.public_key !== "string") { showPush({ state: "error", detail: refusedText(status, body) }); return; }
    const registration = await activeWorker();
    if (!registration) { showPush({ state: "unsupported", detail: "the service worker did not start" }); return; }
    const key = keyBytes(body.public_key);
    let subscription = await registration.pushManager.getSubscription().catch(() => null);
    const same = (a) => a && a.byteLength === key.length && new Uint8Array(a).every((byte, i) => byte === key[i]);
    if (subscription && !same(subscription.options.applicationServerKey)) { await subscription.unsubscribe().catch(() => null); subscription = null; }
    try {
      // A browser without a push service may never settle (headless Chromium): a bound on the wait.
      subscription = subscription || await Promise.race([
        registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key }),
        new Promise((_, fail) => setTimeout(() => fail(new Error("no answer from it in " + SUBSCRIBE_SECONDS + " s")), SUBSCRIBE_SECONDS * 1000))]);
    } catch (error) {
      showPush({ state: "no-push-service", detail: String(error.message || error) });
      return;
    }
    await announce(subscription);
  }
  async function pushOff() {
    showPush({ state: "working" });
    const kept = keptPush();
    if (kept && kept.id) {
      const { status, body } = await call("DELETE", "/notifications/subscriptions/" + encodeURIComponent(kept.id));
      if (status !== 204 && status !== 404) { showPush({ state: "error", detail: refusedText(status, body) }); return; }
    }
    localStorage.removeItem(PUSH_KEY);
    const registration = await worker;
    const subscription = registration ? await registration.pushManager.getSubscription().catch(() => null) : null;
    if (subscription) await subscription.unsubscribe().catch(() => null);
    showPush({ state: "off" });
  }
  $("notify-toggle").addEventListener("click", () => (push.state === "on" ? pushOff() : pushOn()));

  // The worker answers a notification's Allow or Deny itself; then it asks
  // this page to open the notification's session, and says what became of it.
  if ("serviceWorker" in navigator) {
    navigator.serviceWorker.addEventListener("message", (event) => {
      const data = event.data || {};
      if (data.type !== "open" || typeof data.url !== "string") return;
      const id = new URL(data.url, location.origin).searchParams.get("session");
      if (id) select({ id, router: "" }, true);
      if (typeof data.said === "string") say(data.said);
      refreshBoard();
    });
  }

  // Presence (POST /presence): whether this page is seen, and which session
  // it shows, so the router notifies the devices that are away, not this one.
  // Seen is visible and focused: an unfocused window may be behind another.
  function presence(leaving) {
    if (!features.notify || blocked) return;
    const visible = !leaving && document.visibilityState === "visible" && document.hasFocus();
    const shown = current && (wide.matches || $("app").dataset.view === "session") ? current.id : null;
    fetch("/presence", { method: "POST", keepalive: true, headers: headers({ "content-type": "application/json" }),
      body: JSON.stringify({ visible, session: shown }) }).catch(() => null);
  }
  document.addEventListener("visibilitychange", () => presence());
  window.addEventListener("focus", () => presence());
  window.addEventListener("blur", () => presence());
  window.addEventListener("pagehide", () => presence(true));
  setInterval(() => { if (document.visibilityState === "visible") presence(); }, 15000);

  // The open session's notifications and their receipts, its mute and its
  // "turn ended" opt-in: a folded strip under the session's header.
  let alertsOf = null;
  async function loadAlerts() {
    $("alerts").hidden = !features.notify || !current;
    if ($("alerts").hidden) return;
    const target = current;
    const [list, settings] = await Promise.all([
      call("GET", "/notifications?session=" + encodeURIComponent(target.id) + "&limit=20"),
      call("GET", "/notifications/settings")]).catch(() => [null, null]);
    if (current !== target || !list) return;
    const notifications = list.status === 200 && Array.isArray(list.body.notifications) ? list.body.notifications : [];
    if (settings && settings.status === 200) showSessionNotify(sessionNotify(settings.body, target.id));
    const now = Date.now();
    $("alerts-list").replaceChildren(...(notifications.length ? notifications.map((n) => el("div", { class: "alert" },
      el("div", {}, el("strong", { text: n.title || n.kind }), document.createTextNode(" "),
        el("span", { class: "note", text: n.kind + " · " + ago(n.at, now) })),
      el("div", { class: "note", text: (n.receipts || []).map(receiptText).join(" · ") || "no destination yet" })))
      : [el("div", { class: "note", text: list.status === 200 ? "No notifications for this session yet." : refusedText(list.status, list.body) })]));
    alertsOf = { id: target.id, count: notifications.length };
    summarizeAlerts();
  }
  function summarizeAlerts() {
    const parts = ["notifications" + (alertsOf ? " · " + alertsOf.count : "")];
    if ($("mute").checked) parts.push("muted");
    if ($("turn-ended").checked) parts.push("turn ends told");
    $("alerts-summary").textContent = parts.join(" · ");
  }
  function showSessionNotify(setting) {
    $("mute").checked = setting.muted;
    $("turn-ended").checked = setting.turnEnded;
    summarizeAlerts();
  }
  const sessionToggle = (id, key) => $(id).addEventListener("change", async () => {
    if (!current) return;
    const { status, body } = await call("POST", sessionPath(current, "notify"), { [key]: $(id).checked });
    if (status === 200) showSessionNotify(sessionNotify(body, current.id));
    else { $(id).checked = !$(id).checked; say(refusedText(status, body)); }
  });
  sessionToggle("mute", "muted");
  sessionToggle("turn-ended", "turn_ended");
  $("alerts").addEventListener("toggle", () => { if ($("alerts").open) loadAlerts(); });
  setInterval(() => { if ($("alerts").open && document.visibilityState === "visible") loadAlerts(); }, 15000);

  // ---------------------------------------------------------------- start

  // The last board seen, while the router has not answered yet (offline).
  try { sessionsSeen = JSON.parse(localStorage.getItem(BOARD_KEY) || "[]"); } catch (_) { sessionsSeen = []; }
  if (!Array.isArray(sessionsSeen)) sessionsSeen = [];
  renderBoard();
  // The worker answers a notification's action with this page's token, when
  // it has one (a paired device's cookie goes by itself).
  activeWorker().then((registration) => registration && registration.active &&
    registration.active.postMessage({ type: "token", token: token || "" })).catch(() => null);
  // No token is no verdict: a paired device's credential is a cookie the
  // page cannot see. The router's 401 decides (block()).
  if (current) select(current, true);
  refreshBoard().then(() => { if (current && !streamAbort) select(current, true); });
  followBoard();
  probe().then(() => { presence(); checkPush(); loadAlerts(); });
  setInterval(refreshBoard, 15000);  // a safety net beside the live board
  setInterval(() => { if (outbox.all().length) flush(); }, 2000);
  setInterval(renderBoard, 30000);  // "5 min ago" moves on
  window.addEventListener("online", flush);
  flush();
}
