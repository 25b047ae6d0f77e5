// Runs the reference container daemon (npm agents@0.32.0) with its echo
// adapter, for interop and fault tests. Usage:
//   node refdaemon.mjs <path to the unpacked agents package>
// Reads CF_HARNESS_TOKEN, CF_HARNESS_RUNTIME_ID and CF_HARNESS_PORT (0 picks a
// free port) and prints one line once it listens:
//   listening <port>
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const root = process.argv[2];
const runtime = await import(pathToFileURL(join(root, "dist/harness/container/runtime/index.js")));
const daemon = await import(pathToFileURL(join(root, "dist/harness/container/daemon/index.js")));

const token = process.env.CF_HARNESS_TOKEN;
const runtimeId = process.env.CF_HARNESS_RUNTIME_ID;
const port = Number(process.env.CF_HARNESS_PORT ?? "0");
const host = process.env.CF_HARNESS_HOST ?? "127.0.0.1";
const server = await runtime.serve({ adapter: daemon.echoAdapter, runtimeId, token, port, host });
console.log(`listening ${server.port}`);
const stop = () => server.close().finally(() => process.exit(0));
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
