import { describe, expect, mock, test } from "claude-code/testing"

import { ENV, LinkServer, Session, install, until } from "./link-server"

declare function setTimeout(callback: (...args: never[]) => void, ms: number): unknown

// deno-lint-ignore no-explicit-any
type Any = any

/** A linked mod. `beneath` registers the test's own hooks: all of them go in before the first
 * call on `$`, which loads the plug-in. */
async function linked($: Any, on: Any, options: { interactive?: boolean; beneath?: () => void } = {}) {
  const server = new LinkServer()
  const session = new Session()
  mock.env(on, ENV)
  mock.store(on)
  const rows = mock.session(on)
  install(on, server, session)
  options.beneath?.()
  await $.session.start({ cwd: "/work", surface: null, isInteractive: options.interactive ?? true })
  await until(() => server.kinds().includes("model"))
  return { server, session, rows }
}

describe("linking", () => {
  test("says hello, then the model, naming its instance on every post", async ($, on) => {
    const { server } = await linked($, on)
    expect(server.events.slice(0, 2)).toEqual([
      { kind: "hello", sessionId: "0f8fad5b-d9cb-469f-a165-70867728950e", claudeVersion: "2.1.332", interactive: true, capabilities: ["asks"] },
      { kind: "model", model: "claude-opus-5-5" },
    ])
    expect(server.instances.size).toBe(1)
    server.stop()
  })
})

describe("asks", () => {
  test("an answer to an ask nobody waits for is not taken", async ($, on) => {
    const { server } = await linked($, on)
    expect(await server.call("ask.answer", { askId: "ask-none", decision: "allow" })).toEqual({ taken: false })
    server.stop()
  })

  test("a query's ask (no call, nobody to ask) is handed back as it came, and raises no ask", async ($, on) => {
    const { server } = await linked($, on, {
      beneath: () => {
        on("tool.check", () => ({ decision: "ask", reason: "needs approval" }))
        on("classic.UserPromptSubmit", () => ({}))
      },
    })
    await $.classic.UserPromptSubmit({ prompt: "hi", permission_mode: "default" })
    const verdict = await $.tool.check({ tool: "Bash", input: { command: "echo hi > out.txt" } })
    expect(verdict.decision).toBe("ask")
    expect(server.kinds()).not.toContain("ask")
    server.stop()
  })
})

describe("no server", () => {
  test("does nothing at all: no post, no row, no line for the person", async ($, on) => {
    const server = new LinkServer()
    server.alive = false
    const session = new Session()
    mock.env(on, ENV)
    mock.store(on)
    const rows = mock.session(on)
    install(on, server, session)
    await $.session.start({ cwd: "/work", surface: null, isInteractive: true })
    await until(() => server.fetches.length >= 40) // every probe of the start-up race, then nothing
    await $.turn.start({ text: "hi", turnId: "t1" })
    expect(server.fetches.every((each) => each.url.endsWith("/healthz"))).toBe(true)
    expect(rows.appended()).toEqual([])
    expect(session.logged).toEqual([])
  })

  test("below the minimum version it never connects", async ($, on) => {
    const server = new LinkServer()
    const session = new Session()
    session.version = "2.1.309"
    mock.env(on, ENV)
    install(on, server, session)
    await $.session.start({ cwd: "/work", surface: null, isInteractive: true })
    expect(server.fetches).toEqual([])
  })

  test("with no private base it never connects", async ($, on) => {
    const server = new LinkServer()
    mock.env(on, { HOME: "relative/home" })
    install(on, server, new Session())
    await $.session.start({ cwd: "/work", surface: null, isInteractive: true })
    expect(server.fetches).toEqual([])
  })
})

describe("409", () => {
  test("stops for good and tells the person once", async ($, on) => {
    const { server, session } = await linked($, on)
    server.taken = true
    await $.turn.start({ text: "hi", turnId: "t1" })
    await until(() => session.logged.length > 0)
    const count = server.fetches.length
    await $.turn.start({ text: "again", turnId: "t2" })
    await $.turn.complete({ answer: "", durationMs: 1, isAborted: false, turnId: "t2", reason: "answer" })
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(server.fetches.length).toBe(count)
    expect(session.logged).toHaveLength(1)
    expect(session.logged[0]).toContain("another Claude Code process")
  })
})

function message(eventId: string, text: string, person = true): Any {
  return {
    eventId,
    content: [{ type: "text", text }],
    message: person ? { kind: "person", text, messageId: `dm-${eventId}` } : { kind: "card", text },
  }
}

describe("session.message", () => {
  test("into an idle session is a prompt, the person's own words, and its row is stamped", async ($, on) => {
    const { server, session } = await linked($, on)
    expect(await server.call("session.message", message("ev-1", "from the phone"))).toEqual({ as: "prompt" })
    expect(session.submitted).toEqual([
      { text: "from the phone", wait: false, origin: { kind: "plugin", name: "router", asUser: true } },
    ])
    // The engine hands the prompt's row back through session.append.
    await $.session.append({
      message: { type: "user", role: "user", content: [{ type: "text", text: "from the phone" }] },
      door: "prompt",
      origin: { kind: "plugin", name: "router", asUser: true },
      uuid: "u-1",
    })
    await until(() => server.events.some((event) => event.uuid === "u-1"))
    expect(server.events.find((event) => event.uuid === "u-1").wrote).toBe("message")
  })

  test("a card into an idle session is the plug-in speaking", async ($, on) => {
    const { server, session } = await linked($, on)
    expect(await server.call("session.message", message("ev-c", "a card", false))).toEqual({ as: "prompt" })
    expect(session.submitted).toEqual([{ text: "a card", wait: false, origin: { kind: "plugin", name: "router" } }])
  })

  test("into a running turn is a row, reported stamped; a replay writes nothing", async ($, on) => {
    const { server, rows } = await linked($, on)
    await $.turn.start({ text: "work", turnId: "t1" })
    const first = await server.call("session.message", message("ev-2", "also this"))
    expect(first.as).toBe("row")
    expect(await server.call("session.message", message("ev-2", "also this"))).toEqual(first)
    expect(rows.appended()).toHaveLength(1)
    await until(() => server.events.some((event) => event.kind === "append" && event.uuid === first.uuid))
    const row = server.events.find((event) => event.kind === "append" && event.uuid === first.uuid)
    expect(row.wrote).toBe("message")
    expect(row.door).toBe("note")
    expect(row.origin).toEqual({ kind: "plugin", name: "router" })
  })

  test("where no prompt can be taken (-p) it answers a deny, not recorded", async ($, on) => {
    const { server, session } = await linked($, on, { interactive: false })
    session.submitFails = "no session is bound in this process"
    const refused = await server.call("session.message", message("ev-3", "anyone"))
    expect(refused.as).toBe("prompt")
    expect(typeof refused.deny).toBe("string")
    session.submitFails = undefined
    expect(await server.call("session.message", message("ev-3", "anyone"))).toEqual({ as: "prompt" })
  })

  test("rows no request read get one pointer prompt at the turn's end", async ($, on) => {
    const { server, session } = await linked($, on, {
      beneath: () => {
        on("turn.step", async function* () {
          yield { kind: "text", index: 0, text: "thinking", ref: 0 }
          return { turnId: "t1", index: 0, answer: "thinking", toolUses: [], stopReason: "end_turn", usage: null }
        })
      },
    })
    await $.turn.start({ text: "go", turnId: "t1" })
    for await (const _ of $.turn.step({ turnId: "t1", index: 0, model: "claude-opus-5-5", messageCount: 1 })) {
      // drained
    }
    await server.call("session.message", message("ev-a", "the person's words"))
    await server.call("session.message", message("ev-b", "a card's words", false))
    await $.turn.complete({ answer: "", durationMs: 1, isAborted: false, turnId: "t1", reason: "answer" })
    await until(() => session.submitted.length === 1)
    const pointer = session.submitted[0]
    expect(pointer.origin).toEqual({ kind: "plugin", name: "router" })
    expect(pointer.text).toContain("the person's words")
    expect(pointer.text).toContain("a card's words")
    expect(pointer.text).toContain("Dispatch message dm-ev-a")
    await $.session.append({
      // Claude Code frames a prompt that is not the person's words (2.1.332).
      message: { type: "user", role: "user", content: [{ type: "text", text: `The router plugin sent a message:\n${pointer.text}\n\nThis is how...` }] },
      door: "prompt",
      origin: { kind: "plugin", name: "router" },
      uuid: "u-p",
    })
    await until(() => server.events.some((event) => event.uuid === "u-p"))
    expect(server.events.find((event) => event.uuid === "u-p").wrote).toBe("pointer")
  })

  test("rows a later step read get no pointer", async ($, on) => {
    const { server, session } = await linked($, on, {
      beneath: () => {
        on("turn.step", async function* ($: Any, e: Any) {
          yield { kind: "text", index: 0, text: `step ${e.index}`, ref: 0 }
          return { turnId: "t1", index: e.index, answer: "", toolUses: [], stopReason: "end_turn", usage: null }
        })
      },
    })
    await $.turn.start({ text: "go", turnId: "t1" })
    for await (const _ of $.turn.step({ turnId: "t1", index: 0, model: "m", messageCount: 1 })) {
      // drained
    }
    await server.call("session.message", message("ev-d", "read in time"))
    for await (const _ of $.turn.step({ turnId: "t1", index: 1, model: "m", messageCount: 3 })) {
      // drained
    }
    await $.turn.complete({ answer: "", durationMs: 1, isAborted: false, turnId: "t1", reason: "answer" })
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(session.submitted).toEqual([])
  })
})

describe("turns", () => {
  test("turn-start, step snapshots with the whole step so far, done once, turn-complete", async ($, on) => {
    const { server } = await linked($, on, {
      beneath: () => {
        on("turn.step", async function* () {
          yield { kind: "thinking", index: 0, text: "hm", ref: 0 }
          yield { kind: "text", index: 1, text: "Hel", ref: 1 }
          yield { kind: "text", index: 1, text: "lo", ref: 2 }
          yield { kind: "tool", index: 2, id: "toolu_1", name: "Bash", ref: 3 }
          yield { kind: "input", index: 2, json: '{"command":', ref: 4 }
          yield { kind: "input", index: 2, json: '"ls"}', ref: 5 }
          return { turnId: "t1", index: 0, answer: "Hello", toolUses: [], stopReason: "tool_use", usage: null }
        })
      },
    })
    await $.turn.start({ text: "go", turnId: "t1" })
    for await (const _ of $.turn.step({ turnId: "t1", index: 0, model: "claude-opus-5-5", effort: "high", messageCount: 1 })) {
      // drained
    }
    await $.turn.complete({ answer: "Hello", durationMs: 1, isAborted: false, turnId: "t1", reason: "answer" })
    await until(() => server.kinds().includes("turn-complete"))
    const steps = server.events.filter((event) => event.kind === "step")
    const done = steps.filter((event) => event.done)
    expect(done).toHaveLength(1)
    expect(done[0]).toEqual({
      kind: "step",
      turnId: "t1",
      index: 0,
      model: "claude-opus-5-5",
      effort: "high",
      done: true,
      stopReason: "tool_use",
      parts: [
        { type: "reasoning", text: "hm" },
        { type: "text", text: "Hello" },
        { type: "tool-call", id: "toolu_1", name: "Bash", args: '{"command":"ls"}' },
      ],
    })
    // At most ten a second while it streams: these chunks came at once.
    expect(steps.length).toBeLessThanOrEqual(2)
    expect(server.kinds().filter((kind) => kind.startsWith("turn-"))).toEqual(["turn-start", "turn-complete"])
    expect(server.events.find((event) => event.kind === "turn-complete")).toEqual({
      kind: "turn-complete",
      turnId: "t1",
      stopReason: "answer",
    })
  })

  test("set-effort rides on later steps that name an effort", async ($, on) => {
    const efforts: unknown[] = []
    const { server } = await linked($, on, {
      beneath: () => {
        on("turn.step", async function* ($: Any, e: Any) {
          efforts.push(e.effort)
          return { turnId: "t1", index: e.index, answer: "", toolUses: [], stopReason: "end_turn", usage: null }
        })
      },
    })
    expect(await server.call("set-effort", { effort: "max" })).toEqual({ effort: "max" })
    await $.turn.start({ text: "go", turnId: "t1" })
    for await (const _ of $.turn.step({ turnId: "t1", index: 0, model: "m", effort: "medium", messageCount: 1 })) {
      // drained
    }
    for await (const _ of $.turn.step({ turnId: "t1", index: 1, model: "haiku", messageCount: 2 })) {
      // drained
    }
    expect(await server.call("set-effort", { effort: null })).toEqual({ effort: null })
    for await (const _ of $.turn.step({ turnId: "t1", index: 2, model: "m", effort: "medium", messageCount: 3 })) {
      // drained
    }
    expect(efforts).toEqual(["max", undefined, "medium"])
  })

  test("rows of the conversation are reported as session.append handed them", async ($, on) => {
    const { server } = await linked($, on)
    await $.session.append({
      message: { type: "system", name: "turn_duration", content: [{ type: "text", text: "1s" }] },
      door: "notice",
      origin: { kind: "engine" },
      uuid: "n-1",
    })
    await until(() => server.events.some((event) => event.uuid === "n-1"))
    expect(server.events.find((event) => event.uuid === "n-1")).toEqual({
      kind: "append",
      uuid: "n-1",
      door: "notice",
      origin: { kind: "engine" },
      message: { type: "system", name: "turn_duration", content: [{ type: "text", text: "1s" }] },
    })
  })
})

describe("/clear", () => {
  test("session-end, then session-id once the id moved; the socket stays", async ($, on) => {
    const { server, session } = await linked($, on)
    await $.session.end({ reason: "clear", sessionId: session.id, resume: { id: session.id } })
    session.id = "5e3d5b7a-1111-4222-8333-944455556666"
    await $.session.append({
      message: { type: "user", role: "user", isMeta: true, content: [{ type: "text", text: "caveat" }] },
      door: "command",
      origin: { kind: "engine" },
      uuid: "c-1",
    })
    await until(() => server.kinds().includes("session-id"))
    const kinds = server.kinds()
    expect(kinds.indexOf("session-end")).toBeLessThan(kinds.indexOf("session-id"))
    expect(server.events.find((event) => event.kind === "session-id")).toEqual({
      kind: "session-id",
      sessionId: "5e3d5b7a-1111-4222-8333-944455556666",
    })
    expect(kinds.filter((kind) => kind === "hello")).toHaveLength(1)
    const sockets = new Set(server.fetches.map((each) => each.init.socketPath))
    expect(sockets.size).toBe(1)
  })
})

describe("plain calls", () => {
  test("session.model, config.list, command.list, config.set, command.run, model.fork", async ($, on) => {
    const { server } = await linked($, on, {
      beneath: () => {
        on("config.list", async () => ({
          value: [
            { key: "theme", label: "Theme", kind: "choice", value: "dark", options: ["dark", "light"], provider: { plugin: "claude-code", tier: "user" }, isLocked: false, extra: 1 },
          ],
        }))
        on("command.list", async () => ({ value: [{ name: "clear", description: "Clear", source: "builtin" }] }))
        on("config.set", async ($: Any, e: Any) => (e.key === "theme" ? { value: e.value } : { deny: "no such row" }))
        on("command.run", async ($: Any, e: Any) => ({ text: `ran ${e.command} ${e.args ?? ""}`.trim(), context: ["note"] }))
        on("model.fork", async ($: Any, e: Any) => ({ value: { isAnswered: true, text: `forked: ${e.prompt}`, usage: { inputTokens: 1, outputTokens: 1 } } }) as Any)
      },
    })
    expect(await server.call("session.model")).toBe("claude-opus-5-5")
    expect(await server.call("config.list")).toEqual([
      { key: "theme", label: "Theme", kind: "choice", value: "dark", options: ["dark", "light"], provider: { plugin: "claude-code", tier: "user" }, isLocked: false },
    ])
    expect(await server.call("command.list")).toEqual([{ name: "clear", description: "Clear", source: "builtin" }])
    expect(await server.call("config.set", { key: "theme", value: "light" })).toEqual({ value: "light" })
    expect(await server.call("config.set", { key: "nope", value: 1 })).toEqual({ deny: "no such row" })
    expect(await server.call("command.run", { command: "compact", args: "keep it" })).toEqual({ text: "ran compact keep it", context: ["note"] })
    expect(await server.call("model.fork", { prompt: "sum up" })).toEqual({ isAnswered: true, text: "forked: sum up" })
    await expect(server.call("no.such.call")).rejects.toThrow("does not know the call")
  })
})
