// Runs the reference parsers (npm agents@0.32.0) over a corpus, for the
// parity test. Usage:
//   node refparse.mjs <path to the unpacked agents package> < corpus.jsonl
// Each input line is a JSON object {"fn": name, "arg": ...}; each output line
// is the JSON of what the reference returned, with undefined written as
// {"$undefined": true} and non-finite numbers as {"$number": "Infinity"} so
// the comparison on the Python side sees exactly what the caller would.
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { createInterface } from "node:readline";

const root = process.argv[2];
const daemon = await import(pathToFileURL(join(root, "dist/harness/container/daemon/index.js")));
const fns = {
  parseHostMessage: daemon.parseHostMessage,
  parseDaemonMessage: daemon.parseDaemonMessage,
  chunkEntries: daemon.chunkEntries,
  inputText: daemon.inputText,
  stringify: (value) => JSON.stringify(value),
  length: (value) => JSON.stringify(value).length,
};
function replacer(_key, value) {
  if (typeof value === "number" && !Number.isFinite(value)) return { $number: String(value) };
  return value;
}
const out = [];
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (line.length === 0) continue;
  const { fn, arg } = JSON.parse(line);
  let result;
  try {
    result = fns[fn](arg);
  } catch (error) {
    result = { $threw: String(error) };
  }
  out.push(result === undefined ? '{"$undefined":true}' : JSON.stringify(result, replacer));
}
process.stdout.write(out.join("\n") + "\n");
