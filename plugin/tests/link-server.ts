/**
 * A mod link server played beneath the plug-in under `claude plugin test`: it answers the mod's
 * `$.http.fetch` over the socket as the router's `router/modlink/server.py` does, and the engine
 * calls the mod makes (`$.session.id`, `$.prompt.submit`, ...) as the test sets them.
 */

// deno-lint-ignore no-explicit-any
type Any = any

// The kit's environment has timers; the engine's declarations (es2023, no DOM) do not name them.
declare function setTimeout(callback: (...args: never[]) => void, ms: number): unknown

export const SESSION = "0f8fad5b-d9cb-469f-a165-70867728950e"
export const ENV = { XDG_RUNTIME_DIR: "/run/user/1000", HOME: "/home/person" }
export const SOCKET = "/run/user/1000/claude-envoy/ce-"

/** Until `condition()` holds, checked each few milliseconds (bounded by the test's own time). */
export async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 2))
}

const answer = (status: number, body: unknown) => ({ status, ok: status === 200, headers: {}, text: JSON.stringify(body) })

export class LinkServer {
  events: Any[] = []
  results: Any[] = []
  fetches: { url: string; init: Any }[] = []
  instances = new Set<string>()
  /** What each route answers; a test sets `alive = false` for no server, `taken = true` for 409. */
  alive = true
  taken = false
  /** Whether `/healthz` names the asks, as the router's server does (a server that knows only
   * `mod-protocol.ts` does not). */
  asks = true
  private queue: Any[] = []
  private wake: (() => void) | undefined

  /** Queue one call for the mod's next poll and wait for its result. */
  async call(call: string, args?: Any): Promise<Any> {
    const id = `req-${this.queue.length}-${Math.random().toString(36).slice(2)}`
    this.queue.push(args === undefined ? { id, call } : { id, call, args })
    this.wake?.()
    await until(() => this.results.some((result) => result.id === id))
    const result = this.results.find((each) => each.id === id)
    if (!result.ok) throw new Error(result.error)
    return result.value
  }

  kinds(): string[] {
    return this.events.map((event) => event.kind)
  }

  async fetch(url: string, init: Any): Promise<Any> {
    this.fetches.push({ url, init })
    if (!this.alive) throw new Error(`ENOENT: ${init?.socketPath}`)
    const route = url.replace("http://claude-envoy", "")
    if (route === "/healthz") return answer(200, this.asks ? { link: "claude-envoy-mod", capabilities: ["asks"] } : { link: "claude-envoy-mod" })
    const instance = init?.headers?.["x-claude-envoy-mod"]
    if (instance !== undefined) this.instances.add(instance)
    if (this.taken) return answer(409, { error: "taken", message: "another mod instance holds this link" })
    const body = JSON.parse(init.body)
    if (route === "/events") this.events.push(...body.events)
    else if (route === "/results") this.results.push(...body.results)
    else if (route === "/requests") {
      // Held while nothing is queued, as the server's hold is.
      while (this.queue.length === 0 && this.alive && !this.taken) {
        await new Promise<void>((resolve) => {
          this.wake = resolve
          setTimeout(resolve, 50)
        })
      }
      const requests = this.queue
      this.queue = []
      return answer(200, { requests })
    }
    return answer(200, { ok: true })
  }

  stop(): void {
    this.alive = false
    this.wake?.()
  }
}

/** The engine beneath the plug-in: the calls the mod makes, answered as a session would. */
export class Session {
  id = SESSION
  version = "2.1.332"
  model = "claude-opus-5-5"
  submitted: Any[] = []
  logged: string[] = []
  /** Set to make `$.prompt.submit` reject, as it does where no session is bound (a hook that
   * throws is skipped, and the call rejects with nothing beneath to answer it). */
  submitFails: string | undefined
  submitDrops: string | undefined

  submit(args: Any): Any {
    if (this.submitFails !== undefined) throw new Error(this.submitFails)
    if (this.submitDrops !== undefined) return { drop: this.submitDrops }
    this.submitted.push(args)
    return { text: args.text }
  }
}

/** Registers, beneath the plug-in, a server on the socket and a session answering its calls. */
export function install(on: Any, server: LinkServer, session: Session): void {
  const value = (get: () => unknown) => async () => ({ value: await get() })
  on("http.fetch", async (_$: Any, e: Any) => ({ value: await server.fetch(e.url, e.init) }))
  on("session.id", value(() => session.id))
  on("session.version", value(() => ({ version: session.version })))
  on("session.model", value(() => session.model))
  on("prompt.submit", async (_$: Any, e: Any) => session.submit(e))
  on("ui.log", async (_$: Any, e: Any) => {
    session.logged.push(e.text)
    return { value: undefined }
  })
  on("clock.sleep", value(() => undefined))
  on("session.start", (_$: Any, e: Any) => ({ cwd: e.cwd }))
  on("session.end", (_$: Any, e: Any) => ({ sessionId: e.sessionId }))
  on("turn.start", (_$: Any, e: Any) => ({ turnId: e.turnId }))
  on("turn.complete", (_$: Any, e: Any) => ({ text: "" }))
}
