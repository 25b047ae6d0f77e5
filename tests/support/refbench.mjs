// Times the reference parsers (npm agents@0.32.0) over a corpus, for
// bench/wire_parse.py. Usage: node refbench.mjs <package dir> <rounds> < corpus.jsonl
// Each input line is {"fn": name, "arg": text}; prints one JSON line:
// {"<fn>": {"calls": n, "seconds": s}, ...}
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { readFileSync } from "node:fs";

const [root, roundsText] = process.argv.slice(2);
const rounds = Number(roundsText);
const daemon = await import(pathToFileURL(join(root, "dist/harness/container/daemon/index.js")));
const fns = {
  parseHostMessage: daemon.parseHostMessage,
  parseDaemonMessage: daemon.parseDaemonMessage,
  stringify: (text) => JSON.stringify(JSON.parse(text)),
};
const byFn = {};
for (const line of readFileSync(0, "utf8").split("\n")) {
  if (line.length === 0) continue;
  const { fn, arg } = JSON.parse(line);
  (byFn[fn] ??= []).push(arg);
}
const out = {};
for (const [fn, args] of Object.entries(byFn)) {
  const f = fns[fn];
  for (const arg of args) f(arg); // warm up
  const start = process.hrtime.bigint();
  for (let r = 0; r < rounds; r++) for (const arg of args) f(arg);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  out[fn] = { calls: rounds * args.length, seconds };
}
console.log(JSON.stringify(out));
