// The figures of web/README.md: `npm run bench` (or `node bench.mjs [--repeats N]`), after `npm ci`, with
// SEQ2ONNX_PYTHON as for the tests. Prints a table and writes bench-results.json.
//   * page payload: the bytes the demo page fetches until its first translation (JS, WASM, model), as sent by
//     demo/server.js (gzip for code and WASM) and as stored;
//   * time to first translation in Chromium: from the page's navigation start to the first translation shown,
//     a fresh browser context (empty cache) each time; median of the loads;
//   * tokens/s of translateBatch over the numbers 0..999 in words (tokens: the best hypothesis's, EOS counted),
//     in Node (onnxruntime-node), in Chromium (onnxruntime-web, WASM) and in the Python runtime on this machine,
//     after two warm-up calls; median of the repeats; Node's and Chromium's as ratios to Python's; all of it in
//     --rounds rounds (Python, Node, Chromium in turn), medians of the rounds, with their range.
import { execFileSync } from "node:child_process";
import { readFileSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { startServer } from "./demo/server.js";
import { Translator } from "./src/index.js";
import { MODEL_DIR, numberTexts, pythonPath, REPO_DIR, runPython, WEB_DIR } from "./test/python.js";

const arg = (name, fallback) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const REPEATS = arg("--repeats", 5);
const WARMUPS = 2; // calls before the timed ones (the JIT, onnxruntime's first runs)
const PAGE_LOADS = arg("--page-loads", 3);
const NUMBERS = arg("--numbers", 1000); // the inputs: the numbers 0..NUMBERS-1 in words
// rounds of Python, Node, Chromium in turn: the machine is shared, so a drift of its load spreads over all three;
// a figure is the median of the rounds' medians, and the table shows the rounds' range
const ROUNDS = arg("--rounds", 3);
const CHROMIUM = process.env.SEQ2ONNX_CHROMIUM || "/usr/bin/chromium";
const CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
  "--disable-component-update", "--disable-sync"];
const CONFIGS = [["int8", 1], ["int8", 4], ["float32", 1], ["float32", 4]]; // [computeType, beamSize]
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const tokensOf = (results) => results.reduce((n, r) => n + r.tokenIds[0].length + 1, 0);

/** Node's timings in a Node process of their own (`--phase node`): nothing but seq2onnx loaded (in this process,
 * after a round of Chromium driven by playwright, Node's rates fell by up to half). */
function timeNodeApart() {
  const args = [process.argv[1], "--phase", "node", "--repeats", String(REPEATS), "--numbers", String(NUMBERS)];
  return JSON.parse(execFileSync(process.execPath, args, { maxBuffer: 1 << 26, stdio: ["ignore", "pipe", "inherit"] }).toString());
}

async function timeNode(texts) {
  const out = {};
  for (const [computeType, beamSize] of CONFIGS) {
    const t = await Translator.load(MODEL_DIR, { computeType });
    const tokens = tokensOf(await t.translateBatch(texts, { beamSize }));
    for (let i = 1; i < WARMUPS; i++) await t.translateBatch(texts, { beamSize });
    const seconds = [];
    for (let i = 0; i < REPEATS; i++) {
      const start = performance.now();
      await t.translateBatch(texts, { beamSize });
      seconds.push((performance.now() - start) / 1000);
    }
    out[`${computeType} beam ${beamSize}`] = { tokens, seconds };
    await t.release();
  }
  return out;
}

async function timePython(texts) {
  const results = await runPython(CONFIGS.map(([computeType, beamSize]) => ({ op: "bench", model: MODEL_DIR,
    compute_type: computeType, texts, options: { beam_size: beamSize }, repeats: REPEATS, warmups: WARMUPS })), { timeoutMs: 1_800_000 });
  return Object.fromEntries(CONFIGS.map(([c, b], i) => [`${c} beam ${b}`, results[i]]));
}

/** Page loads in fresh contexts -> [payload of the first, times to first translation]; then tokens/s in the page. */
async function timeBrowser(texts) {
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  const srv = await startServer();
  try {
    const firstTranslation = [], loaded = [];
    let payload = null;
    for (let i = 0; i < PAGE_LOADS; i++) {
      srv.stats.clear();
      const context = await browser.newContext();
      const page = await context.newPage();
      await page.goto(`${srv.url}/web/demo/`);
      await page.waitForFunction(() => window.demo?.ready || window.demo?.error, null, { timeout: 120_000 });
      const { error, timings } = await page.evaluate(() => ({ error: window.demo.error, timings: window.demo.timings }));
      if (error) throw new Error(`the demo page failed: ${error}`);
      firstTranslation.push(timings.firstTranslationMs / 1000);
      loaded.push((timings.loadedMs - timings.loadStartMs) / 1000);
      payload ??= payloadOf(srv.stats);
      await context.close();
    }
    const page = await browser.newPage();
    await page.goto(`${srv.url}/web/demo/`);
    await page.waitForFunction(() => window.demo?.ready, null, { timeout: 120_000 });
    const timed = {};
    for (const [computeType, beamSize] of CONFIGS) {
      timed[`${computeType} beam ${beamSize}`] = await page.evaluate(async ([texts, computeType, beamSize, repeats, warmups]) => {
        const { Translator } = await import("/web/src/browser.js");
        const t = await Translator.load("/models/numbers-en-de", { computeType });
        const first = await t.translateBatch(texts, { beamSize });
        const tokens = first.reduce((n, r) => n + r.tokenIds[0].length + 1, 0);
        for (let i = 1; i < warmups; i++) await t.translateBatch(texts, { beamSize });
        const seconds = [];
        for (let i = 0; i < repeats; i++) {
          const start = performance.now();
          await t.translateBatch(texts, { beamSize });
          seconds.push((performance.now() - start) / 1000);
        }
        return { tokens, seconds };
      }, [texts, computeType, beamSize, REPEATS, WARMUPS]);
    }
    const threads = await page.evaluate(async () => (await import("/web/src/browser.js")).ort.env.wasm.numThreads);
    return { firstTranslation, loaded, payload, timed, version: browser.version(), wasmThreads: threads };
  } finally {
    await browser.close();
    await srv.close();
  }
}

/** server stats -> bytes sent and stored, by kind (JS, WASM, model, page) */
function payloadOf(stats) {
  const kinds = {};
  for (const [url, { bytes }] of stats) {
    if (bytes === 0) continue; // HEAD requests (the package check of files it does not load)
    const kind = url.startsWith("/models/") ? "model" : url.endsWith(".wasm") ? "wasm" : /\.m?js$/.test(url) ? "js" : "page";
    const stored = statSync(path.join(REPO_DIR, decodeURIComponent(url).replace(/\/$/, "/index.html"))).size;
    kinds[kind] ??= { sent: 0, stored: 0, files: 0 };
    kinds[kind].sent += bytes;
    kinds[kind].stored += stored;
    kinds[kind].files += 1;
  }
  return kinds;
}

const texts = await numberTexts(Array.from({ length: NUMBERS }, (_, i) => i), ["canonical"]);
if (process.argv.includes("--phase")) { // a child of this script: Node's timings only, as JSON on stdout
  process.stdout.write(JSON.stringify(await timeNode(texts)));
  process.exit(0);
}
console.error(`timing ${texts.length} inputs, ${REPEATS} repeats, ${PAGE_LOADS} page loads ...`);
const rounds = [];
for (let r = 0; r < ROUNDS; r++) {
  console.error(`round ${r + 1} of ${ROUNDS}`);
  rounds.push({ python: await timePython(texts), node: timeNodeApart(), browser: await timeBrowser(texts) });
}
const browser = rounds[0].browser; // payload and page loads: every round's are in the JSON
const firstTranslation = rounds.flatMap((r) => r.browser.firstTranslation);
const loaded = rounds.flatMap((r) => r.browser.loaded);

const rate = (x) => x.tokens / median(x.seconds);
const rows = Object.keys(rounds[0].node).map((key) => {
  const per = (system) => rounds.map((r) => rate(system === "chromium" ? r.browser.timed[key] : r[system][key]));
  const row = { config: key, tokens: rounds[0].node[key].tokens };
  for (const system of ["python", "node", "chromium"]) {
    const rates = per(system);
    Object.assign(row, { [system]: median(rates), [`${system}Rounds`]: rates });
  }
  row.nodeRatioRounds = rounds.map((_, i) => row.nodeRounds[i] / row.pythonRounds[i]);
  row.chromiumRatioRounds = rounds.map((_, i) => row.chromiumRounds[i] / row.pythonRounds[i]);
  return row;
});
const range = (xs, digits = 0) => `${Math.min(...xs).toFixed(digits)}-${Math.max(...xs).toFixed(digits)}`;
const mb = (n) => (n / 2 ** 20).toFixed(2);
const total = Object.values(browser.payload).reduce((a, k) => ({ sent: a.sent + k.sent, stored: a.stored + k.stored }), { sent: 0, stored: 0 });
const lines = [
  `page payload (MiB sent / stored): ${Object.entries(browser.payload).map(([k, v]) => `${k} ${mb(v.sent)} / ${mb(v.stored)}`).join(", ")}; ` +
    `total ${mb(total.sent)} / ${mb(total.stored)}`,
  `time to first translation in Chromium: median ${median(firstTranslation).toFixed(2)} s of ${firstTranslation.length} loads ` +
    `(${range(firstTranslation, 2)} s); model fetched and checked in ${median(loaded).toFixed(2)} s`,
  "",
  `tokens/s, median of ${ROUNDS} rounds (each the median of ${REPEATS} calls), the rounds' range in brackets:`,
  `| translateBatch, ${texts.length} numbers | tokens | Python tok/s | Node tok/s | Chromium tok/s | Node / Python | Chromium / Python |`,
  "|---|---|---|---|---|---|---|",
  ...rows.map((r) => `| ${r.config} | ${r.tokens} | ${r.python.toFixed(0)} (${range(r.pythonRounds)}) | ` +
    `${r.node.toFixed(0)} (${range(r.nodeRounds)}) | ${r.chromium.toFixed(0)} (${range(r.chromiumRounds)}) | ` +
    `${median(r.nodeRatioRounds).toFixed(2)} (${range(r.nodeRatioRounds, 2)}) | ${median(r.chromiumRatioRounds).toFixed(2)} (${range(r.chromiumRatioRounds, 2)}) |`),
];
console.log(lines.join("\n"));

const cpu = os.cpus()[0]?.model ?? "unknown";
const pythonVersion = execFileSync(pythonPath(), ["-c", "import sys, onnxruntime; print(sys.version.split()[0], onnxruntime.__version__)"]).toString().trim();
const ortNode = JSON.parse(readFileSync(path.join(WEB_DIR, "node_modules/onnxruntime-node/package.json"), "utf8")).version;
const ortWeb = JSON.parse(readFileSync(path.join(WEB_DIR, "node_modules/onnxruntime-web/package.json"), "utf8")).version;
const results = {
  command: `node bench.mjs --rounds ${ROUNDS} --repeats ${REPEATS} --page-loads ${PAGE_LOADS} --numbers ${NUMBERS}`,
  date: new Date().toISOString(), load_average_after: os.loadavg(),
  machine: { cpu, cores: os.availableParallelism(), node: process.version, chromium: browser.version,
    python_and_onnxruntime: pythonVersion, onnxruntime_node: ortNode, onnxruntime_web: ortWeb, chromium_wasm_threads: browser.wasmThreads },
  inputs: texts.length, rounds: ROUNDS, repeats: REPEATS, warmups: WARMUPS,
  payload_bytes: browser.payload, first_translation_seconds: firstTranslation, model_load_seconds: loaded,
  tokens_per_second: rows, raw: rounds,
};
writeFileSync(path.join(WEB_DIR, "bench-results.json"), `${JSON.stringify(results, null, 2)}\n`);
console.error("wrote bench-results.json");
