/**
 * The router's Claude Code mod: it links this session to the router's mod link server (the
 * plug-in's `router mcp`, which binds the socket `./protocol.ts` names) and does the server's
 * calls. The wire is the router's `wire/mod.py`; `docs/claude-code.md` says what the real
 * binary does with each piece.
 *
 * Theory of operation
 * -------------------
 * One `Link` per loaded module. The first `session.start` reads the version (below
 * `MOD_MIN_CLAUDE_VERSION` nothing happens), resolves the socket path and probes `/healthz`,
 * retrying a while: `router mcp` may bind only just before this hook runs. No server, or a
 * socket that is not the router's, and the mod does nothing at all, ever, in this process.
 *
 * Linked, it posts `hello` and `model`, then runs two loops on the `$` of that first dispatch
 * (a wait on a `$` call costs no hook budget): the poll (`POST /requests`, held by the server)
 * whose requests are each answered on a `POST /results` of their own, and the event sender,
 * which keeps one `POST /events` in flight and batches what piles up behind it. Every post names
 * this instance in `MOD_INSTANCE_HEADER`; a 409 stops the link for good, as does a server gone.
 * Every hook passes its event on first and reports after, so the session never waits on the
 * link, and nothing a hook does here can throw into the session.
 *
 * A message (`session.message`) is a row (`$.session.append`) while a turn runs or a prompt
 * this mod submitted waits for its turn, and a prompt (`$.prompt.submit`) otherwise. Each step's
 * request reads every row appended before the step began; the rows appended during a turn's
 * last step are unread at its end, and get one pointer prompt (`unreadRowPrompt`). A write is
 * recorded in `$.store` under its `eventId`, so a resend is answered from the record.
 *
 * Asks (ours, beyond claude-envoy 1.19.0 `hooks/mod-protocol.ts`): when Claude Code is about to ask
 * the person whether a tool call may run, the `tool.check` hook reports an `ask` event and waits for the server's `ask.answer`
 * call; `allow` and `deny` are returned as the hook's verdict, anything else (`ask`, no answer
 * because the link went, the person interrupted) hands the verdict beneath back, so Claude Code's
 * own prompt comes up. It raises one only at a server whose `/healthz` names the asks, and only
 * where a person would be asked: the session's permission mode, read from each prompt's
 * `classic.UserPromptSubmit` (`permission_mode`), is one that asks (`ASK_MODES`; `auto` lets a
 * classifier decide, and its `tool.check` says `ask` too, so it raises none).
 */

import {
  ASK_MODES,
  ASK_PERSON_ONLY_TOOLS,
  MOD_CAPABILITY_ASKS,
  MOD_HEALTH_MARKER,
  MOD_INSTANCE_HEADER,
  MOD_MIN_CLAUDE_VERSION,
  MOD_ROUTE_EVENTS,
  MOD_ROUTE_HEALTH,
  MOD_ROUTE_REQUESTS,
  MOD_ROUTE_RESULTS,
  MOD_STATUS_TAKEN,
  MOD_URL_BASE,
  PLUGIN_NAME,
  type SocketEnv,
  type UnreadMessage,
  modVersionAtLeast,
  resolveModSocketPath,
  unreadRowPrompt,
} from "./protocol"

type Json = null | boolean | number | string | Json[] | { [key: string]: Json }
type JsonObject = { [key: string]: Json }
/** What a hook is handed: the engine's own object, read loosely. */
type Input = { readonly [key: string]: Dollar }
// The engine's `$`, typed loosely here: the declarations are the engine's file, written beside a
// loaded mod and never committed, so this module names only what it calls.
// deno-lint-ignore no-explicit-any
type Dollar = any

/** How long the first probe keeps retrying a socket that is not there yet, and how often (the
 * start-up race: the MCP server may bind tens of ms before `session.start`, or a little after). */
const PROBE_TRIES = 40
const PROBE_PAUSE_MS = 250

/** At most ten step snapshots a second (`wire.mod`, `step`). */
const SNAPSHOT_INTERVAL_MS = 100

/** How long `session.end` waits for its event to go out (the hook has 1.5 s of wall clock). */
const END_FLUSH_MS = 1_000

/** What the person is told when another Claude Code process holds this session's link. */
const TAKEN_NOTICE =
  "router: another Claude Code process on this session id holds the router's link; messages sent to this session go there, not here"

/** The `$.store` key of the record of one Envoy event's write. */
const recordKey = (eventId: string): string => `message:${eventId}`

type Part =
  | { type: "text"; text: string }
  | { type: "reasoning"; text: string }
  | { type: "tool-call"; id: string; name: string; args: string }

type Request = { id: string; call: string; args?: JsonObject }

/** A prompt this mod submitted, waiting for its row to come back through `session.append`. */
type Submitted = { text: string; wrote: "message" | "pointer" }

/** The `$` calls the link makes, as closures over the first `session.start`'s `$`. */
type Io = {
  version: () => Promise<{ version: string }>
  id: () => Promise<string>
  model: () => Promise<string>
  socketEnv: () => Promise<SocketEnv>
  fetch: (url: string, init: JsonObject) => Promise<{ status: number; text: string }>
  sleep: (ms: number) => Promise<void>
  storeGet: (key: string) => Promise<unknown>
  storeSet: (key: string, value: Json) => Promise<void>
  append: (args: JsonObject) => Promise<Dollar>
  submit: (args: JsonObject) => Promise<Dollar>
  commandRun: (args: JsonObject) => Promise<Dollar>
  commandList: () => Promise<Dollar[]>
  fork: (args: JsonObject) => Promise<Dollar>
  configSet: (args: JsonObject) => Promise<Dollar>
  configList: () => Promise<Dollar[]>
  log: (text: string) => void
}

/** The answer an ask got: a verdict, or undefined to hand it back to Claude Code's prompt. */
type AskAnswer = { decision: "allow" | "deny"; reason?: string } | undefined

class Taken extends Error {}
class Gone extends Error {}

function textOf(content: readonly Json[]): string {
  const texts: string[] = []
  for (const block of content) {
    if (block !== null && typeof block === "object" && !Array.isArray(block) && block.type === "text" && typeof block.text === "string") {
      texts.push(block.text)
    }
  }
  return texts.join("\n")
}

class Link {
  readonly instance = `mod-${Math.random().toString(36).slice(2, 10)}${Math.random().toString(36).slice(2, 10)}`
  /** Whether the first `session.start` came (the link is tried once a process), and whether it linked. */
  private started = false
  private linked = false
  private path = ""
  private io: Io = undefined as unknown as Io
  private sessionId = ""
  private idMayMove = false
  private model = ""
  private effort: Json = null
  private outbox: JsonObject[] = []
  private sending: Promise<void> | undefined
  /** The main loop's running turn, and whether a prompt of this mod's waits for a turn. */
  private turnId: string | undefined
  private promptsWaiting = 0
  private unread: UnreadMessage[] = []
  private submitted: Submitted[] = []
  private inFlight = new Map<string, Promise<JsonObject>>()
  /** Whether the server names the asks (`/healthz`), the session's permission mode as the last
   * prompt carried it, and the asks waiting for `ask.answer`. */
  private serverAsks = false
  private mode: string | undefined
  private asks = new Map<string, (answer: AskAnswer) => void>()
  /** The usage limits told (`kind:resetsAt`). */
  private limitsTold = new Set<string>()

  get busy(): boolean {
    return this.turnId !== undefined || this.promptsWaiting > 0
  }

  // ------------------------------------------------------------------ start

  /** Link this process, once: `io` is the first `session.start`'s `$`, as closures. */
  async start(io: Io, interactive: boolean): Promise<void> {
    if (this.started) return
    this.started = true
    const { version } = await io.version()
    if (!modVersionAtLeast(version, MOD_MIN_CLAUDE_VERSION)) return
    this.sessionId = await io.id()
    const resolved = resolveModSocketPath(this.sessionId, await io.socketEnv())
    if (resolved.path === undefined) return
    this.path = resolved.path
    this.io = io
    if (!(await this.probe())) return
    this.linked = true
    this.model = await io.model()
    this.emit({ kind: "hello", sessionId: this.sessionId, claudeVersion: version, interactive, capabilities: [MOD_CAPABILITY_ASKS] })
    this.emit({ kind: "model", model: this.model })
    void this.poll()
  }

  /** Whether the router's server answers on the path, retried over the start-up race. */
  private async probe(): Promise<boolean> {
    for (let attempt = 0; attempt < PROBE_TRIES; attempt += 1) {
      try {
        const answer = await this.io.fetch(MOD_URL_BASE + MOD_ROUTE_HEALTH, { method: "GET", socketPath: this.path })
        if (answer.status !== 200) return false
        const health = JSON.parse(answer.text)
        this.serverAsks = Array.isArray(health?.capabilities) && health.capabilities.includes(MOD_CAPABILITY_ASKS)
        return health?.link === MOD_HEALTH_MARKER
      } catch {
        // No socket yet (or none at all): wait for the next try.
      }
      await this.io.sleep(PROBE_PAUSE_MS)
    }
    return false
  }

  /** Stop for good: the server went away, or (409) another mod instance holds the link, which
   * the person is told once, since their deliveries now go to that other process. */
  private stop(why?: unknown): void {
    if (!this.linked) return
    this.linked = false
    this.outbox = []
    // Every ask waiting goes back to Claude Code's own prompt.
    for (const settle of this.asks.values()) settle(undefined)
    this.asks.clear()
    if (why instanceof Taken) this.io.log(TAKEN_NOTICE)
  }

  // ------------------------------------------------------------------ the wire

  private async post(route: string, body: JsonObject): Promise<Json> {
    let answer
    try {
      answer = await this.io.fetch(MOD_URL_BASE + route, {
        method: "POST",
        headers: { "content-type": "application/json", [MOD_INSTANCE_HEADER]: this.instance },
        body: JSON.stringify(body),
        socketPath: this.path,
      })
    } catch {
      throw new Gone()
    }
    if (answer.status === MOD_STATUS_TAKEN) throw new Taken()
    if (answer.status !== 200) return null
    try {
      return JSON.parse(answer.text)
    } catch {
      return null
    }
  }

  /** Queue an event; the sender posts it after whatever is in flight. */
  emit(event: JsonObject): void {
    if (!this.linked) return
    this.outbox.push(event)
    this.sending ??= this.send().finally(() => {
      this.sending = undefined
    })
  }

  private async send(): Promise<void> {
    while (this.linked && this.outbox.length > 0) {
      const events = this.outbox
      this.outbox = []
      try {
        await this.post(MOD_ROUTE_EVENTS, { events })
      } catch (error) {
        this.stop(error)
      }
    }
  }

  /** Until what was emitted so far went out, or `ms` passed. */
  async flushed(ms: number): Promise<void> {
    const sending = this.sending
    if (sending === undefined) return
    await Promise.race([sending, this.io.sleep(ms)])
  }

  private async poll(): Promise<void> {
    while (this.linked) {
      let body: Json
      try {
        body = await this.post(MOD_ROUTE_REQUESTS, {})
      } catch (error) {
        this.stop(error)
        return
      }
      const requests = body !== null && typeof body === "object" && !Array.isArray(body) ? body.requests : undefined
      if (!Array.isArray(requests)) {
        await this.io.sleep(PROBE_PAUSE_MS) // a refused poll: do not spin on it
        continue
      }
      for (const request of requests) void this.answer(request as Request)
    }
  }

  private async answer(request: Request): Promise<void> {
    if (request === null || typeof request !== "object" || typeof request.id !== "string") return
    let result: JsonObject
    try {
      result = { id: request.id, ok: true, value: await this.call(request.call, request.args ?? {}) }
    } catch (error) {
      result = { id: request.id, ok: false, error: error instanceof Error ? error.message : String(error) }
    }
    try {
      if (this.linked) await this.post(MOD_ROUTE_RESULTS, { results: [result] })
    } catch (error) {
      this.stop(error)
    }
  }

  // ------------------------------------------------------------------ the calls

  private async call(name: string, args: JsonObject): Promise<Json> {
    const io = this.io
    switch (name) {
      case "session.message":
        return await this.message(args)
      case "command.run": {
        const ran = await io.commandRun({ command: String(args.command), ...(typeof args.args === "string" ? { args: args.args } : {}) })
        void this.reportModel()
        const out: JsonObject = {}
        if (typeof ran?.text === "string") out.text = ran.text
        if (Array.isArray(ran?.context)) out.context = ran.context.map(String)
        return out
      }
      case "model.fork": {
        const forked = await io.fork({ prompt: String(args.prompt) })
        return forked.isAnswered ? { isAnswered: true, text: forked.text } : { isAnswered: false, reason: String(forked.reason) }
      }
      case "config.set": {
        const set = await io.configSet({ key: String(args.key), value: args.value ?? null })
        return typeof set?.deny === "string" ? { deny: set.deny } : { value: set.value }
      }
      case "session.model":
        return await io.model()
      case "config.list":
        return (await io.configList()).map(configRow)
      case "command.list":
        return (await io.commandList()).map(commandInfo)
      case "ask.answer": {
        const settle = this.asks.get(String(args.askId))
        if (settle === undefined) return { taken: false }
        const decision = args.decision
        settle(decision === "allow" ? { decision } : decision === "deny" ? { decision, reason: String(args.reason ?? "The person denied this call") } : undefined)
        return { taken: true }
      }
      case "set-effort":
        this.effort = args.effort ?? null
        return { effort: this.effort }
      default:
        throw new Error(`the mod does not know the call ${JSON.stringify(name)}`)
    }
  }

  /** One message, once per `eventId`: a replay, or a second request for an id still being
   * written, gets the first write's answer and writes nothing. */
  private async message(args: JsonObject): Promise<JsonObject> {
    const eventId = typeof args.eventId === "string" ? args.eventId : undefined
    if (eventId === undefined) return await this.write(args)
    const pending = this.inFlight.get(eventId)
    if (pending !== undefined) return await pending
    const writing = (async () => {
      const recorded = await this.io.storeGet(recordKey(eventId))
      if (recorded !== undefined) return recorded as JsonObject
      const written = await this.write(args)
      // A refusal is not recorded, so a resend can land.
      if (written.deny === undefined) await this.io.storeSet(recordKey(eventId), written)
      return written
    })()
    this.inFlight.set(eventId, writing)
    try {
      return await writing
    } finally {
      this.inFlight.delete(eventId)
    }
  }

  private async write(args: JsonObject): Promise<JsonObject> {
    const content = Array.isArray(args.content) ? args.content : []
    const message = args.message as UnreadMessage
    const text = textOf(content) || String(message?.text ?? "")
    if (this.busy) {
      const blocks = content.filter((block) => (block as JsonObject)?.type === "text")
      const appended = await this.io.append({
        message: { type: "user", content: blocks.length > 0 ? blocks : [{ type: "text", text }] },
      })
      if (typeof appended?.deny === "string") return { deny: appended.deny, as: "row" }
      // The engine does not hand a mod its own row back: report it here, stamped.
      this.emit({
        kind: "append",
        uuid: appended.uuid,
        door: "note",
        origin: { kind: "plugin", name: PLUGIN_NAME },
        message: appended.message,
        wrote: "message",
      })
      this.unread.push(message)
      return { as: "row", uuid: appended.uuid }
    }
    const submitted = await this.submit(text, "message", message?.kind === "person")
    return submitted === undefined ? { as: "prompt" } : { deny: submitted, as: "prompt" }
  }

  /** Submit a prompt; undefined when the session took it, else why not. The prompt's row comes
   * back through `session.append`, where `wrote` stamps it. */
  private async submit(text: string, wrote: "message" | "pointer", asUser: boolean): Promise<string | undefined> {
    const entry = { text, wrote }
    this.submitted.push(entry)
    this.promptsWaiting += 1
    let taken
    try {
      taken = await this.io.submit(asUser ? { text, asUser: true } : { text })
    } catch (error) {
      // In -p mode: "no session is bound in this process".
      taken = { drop: error instanceof Error ? error.message : String(error) }
    }
    if (typeof taken?.drop === "string") {
      this.promptsWaiting -= 1
      this.submitted = this.submitted.filter((each) => each !== entry)
      return taken.drop
    }
    return undefined
  }

  private async reportModel(): Promise<void> {
    try {
      const model = await this.io.model()
      if (model !== this.model) {
        this.model = model
        this.emit({ kind: "model", model })
      }
    } catch {
      // The model is reported again with the next step.
    }
  }

  // ------------------------------------------------------------------ the hooks' reports

  /** After `/clear` the process goes on under a new id; the socket stays where it is. */
  async checkSessionId(readId: () => Promise<string>): Promise<void> {
    if (!this.linked || !this.idMayMove) return
    const id = await readId()
    if (id !== this.sessionId) {
      this.sessionId = id
      this.idMayMove = false
      this.emit({ kind: "session-id", sessionId: id })
    }
  }

  ended(reason: string): void {
    if (reason === "clear") this.idMayMove = true
    this.emit({ kind: "session-end", reason })
  }

  appended(e: Input): void {
    const message = e.message as JsonObject
    const event: JsonObject = { kind: "append", uuid: e.uuid, door: e.door, origin: e.origin, message }
    const origin = e.origin as JsonObject
    if (e.door === "prompt" && origin?.kind === "plugin" && origin?.name === PLUGIN_NAME) {
      // A prompt not submitted as the person's own words comes back framed ("The router plugin
      // sent a message:\n<text>\n\n<how Claude Code surfaces it>", 2.1.332): found by inclusion.
      const text = textOf((message?.content as Json[]) ?? [])
      const at = this.submitted.findIndex((each) => text.includes(each.text))
      if (at >= 0) {
        event.wrote = this.submitted[at]!.wrote
        this.submitted.splice(at, 1)
      }
    }
    this.emit(event)
  }

  turnStarted(turnId: string): void {
    if (this.promptsWaiting > 0) this.promptsWaiting -= 1
    this.turnId = turnId
    this.emit({ kind: "turn-start", turnId })
  }

  /** The effort a step's request goes out with: the `set-effort` pick over the engine's, and
   * only where the engine named one. */
  effortFor(effort: Json | undefined): Json | undefined {
    return effort === undefined || this.effort === null ? effort : this.effort
  }

  stepStarted(): void {
    // This step's request carries every row appended before it.
    this.unread = []
  }

  snapshot(e: Input, parts: Part[], done: boolean, stopReason?: Json): void {
    const event: JsonObject = { kind: "step", turnId: e.turnId, index: e.index, model: e.model, parts: parts.map((part) => ({ ...part })), done }
    if (e.effort !== undefined) event.effort = e.effort
    if (done) event.stopReason = stopReason ?? null
    this.emit(event)
    if (typeof e.model === "string" && e.model !== this.model) {
      this.model = e.model
      this.emit({ kind: "model", model: e.model })
    }
  }

  async turnCompleted(turnId: string, reason: string): Promise<void> {
    if (this.turnId === turnId) this.turnId = undefined
    this.emit({ kind: "turn-complete", turnId, stopReason: reason })
    if (this.unread.length === 0 || !this.linked) return
    const unread = this.unread
    this.unread = []
    const dropped = await this.submit(unreadRowPrompt(unread), "pointer", false)
    if (dropped !== undefined) this.unread = [...unread, ...this.unread]
  }

  // ------------------------------------------------------------------ usage limit

  /** The session's measure: a rate-limit window at 100 % with a reset ahead is the account's usage
   * limit (Claude Code 2.1.332 measures it from the 429's `anthropic-ratelimit-unified-*` headers,
   * before its own "You've hit your limit" answer); told once per window and reset. */
  measured(rateLimits: Dollar): void {
    if (!Array.isArray(rateLimits)) return
    for (const window of rateLimits) {
      const resetsAt = typeof window?.resetsAt === "string" ? Date.parse(window.resetsAt) : NaN
      if (typeof window?.percentUsed !== "number" || window.percentUsed < 100 || !(resetsAt > Date.now())) continue
      const key = `${String(window.kind)}:${resetsAt}`
      if (this.limitsTold.has(key)) continue
      this.limitsTold.add(key)
      this.emit({ kind: "usage-limit", resetsAt, rateLimitType: String(window.kind) })
    }
  }

  // ------------------------------------------------------------------ asks

  permissionMode(mode: unknown): void {
    if (typeof mode === "string") this.mode = mode
  }

  /** Whether `tool.check`'s verdict `result` for `e` is an ask a person would answer. */
  wouldAskPerson(e: Input, result: Dollar): boolean {
    return (
      this.linked && this.serverAsks && result?.decision === "ask" && e.approver === "person" &&
      e.agentId === undefined && typeof e.tool_use_id === "string" && this.mode !== undefined &&
      ASK_MODES.includes(this.mode) && !ASK_PERSON_ONLY_TOOLS.includes(String(e.tool))
    )
  }

  /** Report the ask and wait for its answer: undefined when it is handed back (the server said
   * `ask`, the link went, or `signal` aborted: the person interrupted). */
  async ask(e: Input, result: Dollar, signal: Dollar): Promise<AskAnswer> {
    const askId = `ask-${Math.random().toString(36).slice(2, 10)}${Math.random().toString(36).slice(2, 10)}`
    const answered = new Promise<AskAnswer>((resolve) => {
      this.asks.set(askId, (answer) => {
        this.asks.delete(askId)
        resolve(answer)
      })
    })
    try {
      signal?.addEventListener?.("abort", () => this.asks.get(askId)?.(undefined))
    } catch {
      // No signal to follow: the answer or the link's end settles it.
    }
    const event: JsonObject = { kind: "ask", askId, tool: String(e.tool), input: (e.input ?? null) as Json, summary: askSummary(String(e.tool), e.input) }
    event.toolUseId = String(e.tool_use_id)
    if (typeof result?.reason === "string") event.reason = result.reason
    this.emit(event)
    return await answered
  }

  get isLinked(): boolean {
    return this.linked
  }
}

/** A sentence a person can read: `Bash wants to run: echo hi > out.txt (write a file)`. */
function askSummary(tool: string, input: Dollar): string {
  const object = input !== null && typeof input === "object" ? input : {}
  const key = ["command", "file_path", "path", "url", "pattern"].find((each) => typeof object[each] === "string")
  let subject = key === undefined ? JSON.stringify(input ?? null) : String(object[key])
  if (subject.length > 200) subject = subject.slice(0, 199) + "…"
  const said = typeof object.description === "string" && object.description !== "" ? ` (${object.description})` : ""
  return `${tool} wants to ${tool === "Bash" ? "run" : "use"}: ${subject}${said}`
}

function configRow(row: Dollar): JsonObject {
  const out: JsonObject = {
    key: row.key,
    label: row.label,
    kind: row.kind,
    value: row.value,
    provider: { plugin: String(row.provider?.plugin), tier: String(row.provider?.tier) },
    isLocked: row.isLocked === true,
  }
  if (typeof row.description === "string") out.description = row.description
  if (Array.isArray(row.options)) out.options = row.options.map(String)
  return out
}

function commandInfo(command: Dollar): JsonObject {
  const out: JsonObject = { name: command.name, description: String(command.description ?? ""), source: command.source }
  if (typeof command.plugin === "string") out.plugin = command.plugin
  return out
}

/** A step's parts from its chunks, in the order their blocks opened. */
class StepParts {
  private byIndex = new Map<number, Part>()
  readonly parts: Part[] = []

  add(chunk: Dollar): boolean {
    const index = Number(chunk.index)
    const part = this.byIndex.get(index)
    if (chunk.kind === "text" || chunk.kind === "thinking") {
      const type = chunk.kind === "text" ? "text" : "reasoning"
      if (part === undefined) this.open(index, { type, text: String(chunk.text) })
      else if (part.type !== "tool-call") part.text += String(chunk.text)
      return true
    }
    if (chunk.kind === "tool") {
      this.open(index, { type: "tool-call", id: String(chunk.id), name: String(chunk.name), args: "" })
      return true
    }
    if (chunk.kind === "input" && part?.type === "tool-call") {
      part.args += String(chunk.json)
      return true
    }
    return false
  }

  private open(index: number, part: Part): void {
    this.byIndex.set(index, part)
    this.parts.push(part)
  }
}

const link = new Link()

export function register(on: Dollar): void {
  on("session.start", async ($: Dollar, e: Dollar, next: Dollar) => {
    const result = await next(e)
    try {
      // `$` may only be spelled `$.noun.verb(...)` at a call site, never handed on: the link gets
      // this dispatch's calls as closures, and keeps them for the process's life.
      const io: Io = {
        version: () => $.session.version(),
        id: () => $.session.id(),
        model: () => $.session.model(),
        socketEnv: async () => ({
          XDG_RUNTIME_DIR: await $.env.get("XDG_RUNTIME_DIR"),
          CLAUDE_CONFIG_DIR: await $.env.get("CLAUDE_CONFIG_DIR"),
          HOME: await $.env.get("HOME"),
        }),
        fetch: (url, init) => $.http.fetch(url, init),
        sleep: (ms) => $.clock.sleep(ms),
        storeGet: (key) => $.store.get(key),
        storeSet: (key, value) => $.store.set(key, value),
        append: (args) => $.session.append(args),
        submit: (args) => $.prompt.submit(args),
        commandRun: (args) => $.command.run(args),
        commandList: () => $.command.list(),
        fork: (args) => $.model.fork(args),
        configSet: (args) => $.config.set(args),
        configList: () => $.config.list(),
        log: (text) => $.ui.log(text),
      }
      // Not awaited: the probe may wait out the start-up race, and a `$.clock` wait is the
      // hook's own time; the session's start waits on none of it.
      void link.start(io, e.isInteractive === true).catch(() => undefined)
    } catch {
      // Nothing reached: the session runs as if the plug-in shipped no mod.
    }
    return result
  })

  on("session.end", async ($: Dollar, e: Dollar, next: Dollar) => {
    const result = await next(e)
    link.ended(String(e.reason))
    try {
      await link.flushed(END_FLUSH_MS)
    } catch {
      // The link is the session's servant: its end is never the session's problem.
    }
    return result
  })

  on(
    "session.append",
    // Spelled out: the engine reads a matcher off the source (the doors of `MOD_APPEND_DOORS`).
    { door: ["prompt", "command", "response", "tool-result", "tool-message", "delivery", "note", "notice"] }, async ($: Dollar, e: Dollar, next: Dollar) => {
    const result = await next(e)
    if (link.isLinked && e.agentId === undefined) {
      try {
        await link.checkSessionId(() => $.session.id())
      } catch {
        // Read again on the next row.
      }
      link.appended({ ...e, uuid: result?.uuid ?? e.uuid, message: result?.message ?? e.message })
    }
    return result
  })

  on("turn.start", async ($: Dollar, e: Dollar, next: Dollar) => {
    const result = await next(e)
    if (link.isLinked && e.agentId === undefined) {
      try {
        await link.checkSessionId(() => $.session.id())
      } catch {
        // Read again on the next row.
      }
      link.turnStarted(String(result?.turnId ?? e.turnId))
    }
    return result
  })

  on("turn.step", async function* ($: Dollar, e: Dollar, next: Dollar) {
    if (!link.isLinked || e.agentId !== undefined) return yield* next(e)
    const effort = link.effortFor(e.effort)
    const input = effort === e.effort ? e : { ...e, effort }
    link.stepStarted()
    const step = new StepParts()
    let last = 0
    const stream = next(input)
    for await (const chunk of stream) {
      yield chunk
      if (step.add(chunk) && Date.now() - last >= SNAPSHOT_INTERVAL_MS) {
        last = Date.now()
        link.snapshot(input, step.parts, false)
      }
    }
    const result = await stream.result
    link.snapshot(input, step.parts, true, result?.stopReason)
    return result
  })

  on("classic.UserPromptSubmit", async ($: Dollar, e: Dollar, next: Dollar) => {
    // Each prompt carries the session's permission mode: whether an ask is the person's.
    link.permissionMode(e.permission_mode)
    return await next(e)
  })

  on("tool.check", async ($: Dollar, e: Dollar, next: Dollar) => {
    const result = await next(e)
    if (!link.wouldAskPerson(e, result)) return result
    try {
      const answer = await link.ask(e, result, next.signal)
      return answer === undefined ? result : answer
    } catch {
      return result // Never worse than without the router: Claude Code's own prompt.
    }
  })

  on("session.measure", async ($: Dollar, e: Dollar, next: Dollar) => {
    const result = await next(e)
    if (link.isLinked) link.measured(e.rateLimits)
    return result
  })

  on("turn.complete", async ($: Dollar, e: Dollar, next: Dollar) => {
    const result = await next(e)
    if (link.isLinked && e.agentId === undefined) {
      // Not awaited: the pointer prompt waits for the session to be idle, which this turn's end is.
      void link.turnCompleted(String(e.turnId), String(e.reason)).catch(() => undefined)
    }
    return result
  })
}
