// An ACP client on the official SDK (npm @agentclientprotocol/sdk 2.4.0)
// driving `router acp`, for tests/acp/test_router_acp.py.
//
//   node acp_client.mjs SDK_DIR SESSION DECISION -- COMMAND ARGS...
//
// Spawns COMMAND ARGS (the `router acp` process), then: initialize,
// session/list, session/load SESSION, and three prompts: "hello" (answered),
// "ask" (the permission request answered with DECISION: allow -> the
// allow_once option, deny -> reject_once), "slow" (cancelled with
// session/cancel once its first update came). Prints one JSON line: what
// each step answered and the updates seen.
//
//   node acp_client.mjs SDK_DIR SESSION withdrawn -- COMMAND ARGS...
//
// (tests/acp/test_router_acp_claude.py) initialize, session/load SESSION,
// then leave the first permission request unanswered: it prints
// {"permission": PARAMS} as soon as it comes, and waits for the agent to
// withdraw it ($/cancel_request: another surface answered) and for the
// tool's call to end in a session/update (completed or failed); then one
// JSON line as above (loadUpdates, permissions, withdrawn, updates).
//
//   node acp_client.mjs SDK_DIR SESSION resume -- COMMAND ARGS...
//
// initialize, session/load SESSION; one JSON line with loadUpdates.
//
//   node acp_client.mjs SDK_DIR CWD new -- COMMAND ARGS...
//
// (tests/acp/test_router_acp_new.py) initialize, session/new {cwd: CWD,
// _meta: {harness: "echo"}}, a prompt "hello" to the session it answered,
// then session/new with the folder above CWD (no project: its error
// caught), then session/list; one JSON line with each (new, prompt with its
// updates, refused: {code, message}, list).
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, session, decision, dashes, ...command] = process.argv.slice(2);
if (dashes !== "--" || command.length === 0) {
  console.error("usage: acp_client.mjs SDK_DIR SESSION DECISION -- COMMAND ARGS...");
  process.exit(2);
}
const acp = await import(pathToFileURL(path.join(sdkDir, "dist/v1/stable/acp.js")).href);

const child = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

let updates = [];
let onUpdate = () => {};
const permissions = [];
const app = acp
  .client({ name: "router-test-client" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params.update);
    onUpdate(params.update);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    permissions.push(params);
    const kind = decision === "allow" ? "allow_once" : "reject_once";
    const option = params.options.find((o) => o.kind === kind);
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  });

let onWithdrawn = () => {};
const withdrawn = [];
const modeApp = acp
  .client({ name: "router-test-client" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params.update);
    onUpdate(params.update);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params, signal }) => {
    permissions.push(params);
    console.log(JSON.stringify({ permission: params }));
    return new Promise((resolve) => {
      const gone = () => {
        withdrawn.push(params.toolCall.toolCallId);
        onWithdrawn();
        resolve({ outcome: { outcome: "cancelled" } });
      };
      if (signal.aborted) gone();
      else signal.addEventListener("abort", gone);
    });
  });

if (decision === "withdrawn" || decision === "resume") {
  const out = await modeApp.connectWith(stream, async (ctx) => {
    const result = {};
    result.initialize = await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    });
    result.load = await ctx.request(acp.methods.agent.session.load, { sessionId: session, cwd: "/", mcpServers: [] });
    result.loadUpdates = updates.slice();
    if (decision === "withdrawn") {
      const ended = (u) =>
        (u.sessionUpdate === "tool_call" || u.sessionUpdate === "tool_call_update") &&
        (u.status === "completed" || u.status === "failed");
      await new Promise((resolve) => {
        const check = () => {
          if (withdrawn.length > 0 && updates.some(ended)) resolve();
        };
        onUpdate = check;
        onWithdrawn = check;
        check();
      });
      result.permissions = permissions;
      result.withdrawn = withdrawn;
      result.updates = updates;
    }
    return result;
  });
  console.log(JSON.stringify(out));
  child.stdin.end();
  child.kill("SIGTERM");
  process.exit(0);
}

if (decision === "new") {
  const out = await modeApp.connectWith(stream, async (ctx) => {
    const result = {};
    result.initialize = await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    });
    result.new = await ctx.request(acp.methods.agent.session.new, {
      cwd: session, mcpServers: [], _meta: { harness: "echo" },
    });
    updates = [];
    const answer = await ctx.request(acp.methods.agent.session.prompt, {
      sessionId: result.new.sessionId,
      prompt: [{ type: "text", text: "hello" }],
    });
    result.prompt = { stopReason: answer.stopReason, updates: updates.slice() };
    try {
      result.refused = await ctx.request(acp.methods.agent.session.new, { cwd: path.dirname(session), mcpServers: [] });
    } catch (error) {
      result.refused = { code: error.code, message: error.message };
    }
    result.list = await ctx.request(acp.methods.agent.session.list, {});
    return result;
  });
  console.log(JSON.stringify(out));
  child.stdin.end();
  child.kill("SIGTERM");
  process.exit(0);
}

const take = () => {
  const taken = updates;
  updates = [];
  return taken;
};

const out = await app.connectWith(stream, async (ctx) => {
  const result = {};
  result.initialize = await ctx.request(acp.methods.agent.initialize, {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
  });
  result.list = await ctx.request(acp.methods.agent.session.list, {});
  result.load = await ctx.request(acp.methods.agent.session.load, { sessionId: session, cwd: "/", mcpServers: [] });
  result.loadUpdates = take();
  result.prompts = [];
  for (const text of ["hello", "ask", "slow"]) {
    let cancelled = false;
    onUpdate = (update) => {
      if (text === "slow" && !cancelled && update.sessionUpdate === "agent_message_chunk") {
        cancelled = true;
        ctx.notify(acp.methods.agent.session.cancel, { sessionId: session });
      }
    };
    const answer = await ctx.request(acp.methods.agent.session.prompt, {
      sessionId: session,
      prompt: [{ type: "text", text }],
    });
    result.prompts.push({ text, stopReason: answer.stopReason, updates: take() });
  }
  result.permissions = permissions;
  try {
    await ctx.request(acp.methods.agent.session.load, { sessionId: "no-such-session", cwd: "/", mcpServers: [] });
    result.unknown = null;
  } catch (error) {
    result.unknown = { code: error.code, message: error.message };
  }
  return result;
});
console.log(JSON.stringify(out));
child.stdin.end();
child.kill("SIGTERM");
process.exit(0);
