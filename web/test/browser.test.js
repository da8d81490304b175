// The demo page in headless Chromium (Debian's chromium, driven by playwright-core; nothing downloads a browser),
// served by demo/server.js on 127.0.0.1: type a number and read the page's answer; translate a fixed list in the
// page and compare with the Python runtime; save a screenshot of the page to docs/web-demo.png.
//
// What is equal to what (the WASM build of onnxruntime runs other kernels than the native one Python uses):
//   against Python: compare.js's rule (tests/agreement.py, applied by python_reference.py): every hypothesis's ids
//         equal to Python's up to ties judged by the Python runtime teacher-forced, scores within the bound derived
//         from the package's weights (int8: plus a quantization step of the logits' input, since a float32 rounding
//         difference of another kernel can move an activation's int8 value; a judge scoring one sentence alone
//         quantizes at another scale, so its comparisons allow agreement.py's INT8_JUDGE), fp32 attention as compare.js;
//   int8: also every hypothesis (ids, scores to the bit) equal to this package run in Node on onnxruntime-web's WASM:
//         the browser runs the same decoding on the same kernels, so the same arithmetic.
// SEQ2ONNX_SKIP_BROWSER=1 skips it (with a message); a missing Chromium fails it, saying how to install one.
import assert from "node:assert/strict";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import * as ortWeb from "onnxruntime-web";
import { startServer } from "../demo/server.js";
import { browserPlatform } from "../src/platform_browser.js";
import { nodePlatform } from "../src/platform_node.js";
import { Translator } from "../src/translator.js";
import { assertSameTranslations } from "./compare.js";
import { MODEL_DIR, numberTexts, ODD_LINES, pythonOptions, REPO_DIR, runPython } from "./python.js";

const CHROMIUM = process.env.SEQ2ONNX_CHROMIUM || "/usr/bin/chromium";
const SKIP = process.env.SEQ2ONNX_SKIP_BROWSER === "1";
const SCREENSHOT = path.join(REPO_DIR, "docs", "web-demo.png");
const PAGE_TIMEOUT_MS = 120_000;
// as root, without a sandbox; no connections of Chromium's own (this machine reaches no outside host)
const CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
  "--disable-component-update", "--disable-sync"];
const CONFIGS = [
  ["float32", { beamSize: 1 }], ["float32", { beamSize: 4, numHypotheses: 2, returnAttention: true }],
  ["int8", { beamSize: 1 }], ["int8", { beamSize: 4 }], ["int8", { beamSize: 4, numHypotheses: 2 }],
];
const SHIPPED = JSON.parse(readFileSync(path.join(MODEL_DIR, "manifest.json"), "utf8"));
const DECODER_BYTES = SHIPPED.files["decoder_step.onnx"].bytes;
// the package in Node on onnxruntime-web's WASM kernels: what the browser must give to the bit
const wasmInNode = { ...nodePlatform, ort: ortWeb, outputsInto: false, sessionOptions: () => browserPlatform.sessionOptions() };

/** Type `text` into the page's box, press Translate, and wait for the page to show its translation. */
async function typeAndTranslate(page, text) {
  const done = await page.evaluate(() => window.demo.translations);
  await page.fill("#text", text);
  await page.click("#go");
  await page.waitForFunction(([t, n]) => window.demo.translations > n && window.demo.lastText === t, [text, done]);
}

// broken copies of the package, served to the page: the browser's checks (fetch, HEAD sizes, Web Crypto SHA-256)
const BROKEN = {
  intact: [() => {}, null],
  "format_version 5": [(dir, m) => (m.format_version = 5), /format_version 5 is unknown; this runtime reads format_version 1, 2, 3 and 4/],
  "a corrupted tokenizer": [(dir) => {
    const data = readFileSync(path.join(dir, "tokenizer.json"));
    data[100] ^= 1;
    writeFileSync(path.join(dir, "tokenizer.json"), data);
  }, /tokenizer\.json: its SHA-256 does not match manifest\.json/],
  "a corrupted int8 graph": [(dir) => {
    const data = readFileSync(path.join(dir, "encoder.int8.onnx"));
    data[data.length - 100] ^= 1;
    writeFileSync(path.join(dir, "encoder.int8.onnx"), data);
  }, /encoder\.int8\.onnx: its SHA-256 does not match manifest\.json/],
  "a listed file missing": [(dir) => unlinkSync(path.join(dir, "README.md")), /README\.md is missing \(listed in manifest\.json\)/],
  "a file of another size": [(dir, m) => (m.files["decoder_step.onnx"].bytes += 1), new RegExp(`decoder_step\\.onnx has ${DECODER_BYTES} bytes, manifest\\.json says ${DECODER_BYTES + 1}`)],
};

describe("the demo page in Chromium", { skip: SKIP && "SEQ2ONNX_SKIP_BROWSER=1: the browser test is skipped" }, () => {
  let srv, browser, page, texts, python;
  const broken = mkdtempSync(path.join(tmpdir(), "seq2onnx-web-browser-"));

  before(async () => {
    if (!existsSync(CHROMIUM)) {
      throw new Error(`no Chromium at ${CHROMIUM}: install Debian's package (apt-get update && apt-get install -y ` +
        "chromium), or set SEQ2ONNX_CHROMIUM to a Chromium executable; SEQ2ONNX_SKIP_BROWSER=1 skips this test");
    }
    const { chromium } = await import("playwright-core");
    // every 6th number in words and in digits, and the odd lines (362 texts; Node's parity test has all 1000 numbers)
    texts = [...(await numberTexts(Array.from({ length: 167 }, (_, i) => 6 * i), ["canonical", "digits"])), ...ODD_LINES];
    python = await runPython(CONFIGS.map(([computeType, o]) => ({ op: "translate", model: MODEL_DIR, compute_type: computeType,
      texts, options: pythonOptions(o) })));
    for (const [name, [change]] of Object.entries(BROKEN)) {
      const dir = path.join(broken, name.replace(/[^a-z0-9]+/gi, "-"));
      cpSync(MODEL_DIR, dir, { recursive: true });
      const m = JSON.parse(readFileSync(path.join(dir, "manifest.json"), "utf8"));
      change(dir, m);
      writeFileSync(path.join(dir, "manifest.json"), JSON.stringify(m));
    }
    await runPython([{ op: "export_random", out: path.join(broken, "format-2"), decoder_format: 2 }]);
    srv = await startServer({ mounts: { "/test-packages/": broken } });
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: PAGE_TIMEOUT_MS });
    page = await browser.newPage({ viewport: { width: 900, height: 780 } });
    page.setDefaultTimeout(PAGE_TIMEOUT_MS);
    page.on("pageerror", (e) => console.error(`page error: ${e.message}`));
    await page.goto(`${srv.url}/web/demo/`);
    await page.waitForFunction(() => window.demo?.ready || window.demo?.error);
    const error = await page.evaluate(() => window.demo.error);
    assert.equal(error, null, `the page failed: ${error}`);
  });

  after(async () => {
    await browser?.close();
    await srv?.close();
    rmSync(broken, { recursive: true, force: true });
  });

  test("typing a number shows Python's translation and n-best list", async () => {
    const text = "six hundred and twelve";
    const [py] = await runPython([{ op: "translate", model: MODEL_DIR, compute_type: "int8", texts: [text],
      options: { beam_size: 4, num_hypotheses: 3 } }]);
    await typeAndTranslate(page, text);
    assert.equal(await page.textContent("#best"), py.results[0].hypotheses[0]);
    const rows = await page.$$eval("#nbest-table tbody tr", (trs) => trs.map((tr) => tr.children[1].textContent));
    assert.equal(rows.length, 3);
    assert.equal(rows[0], py.results[0].hypotheses[0]);
    // the heatmap: a row per target piece of the best hypothesis, a column per source piece (EOS included) + labels
    const cells = await page.$$eval("#attention tr", (trs) => trs.map((tr) => tr.children.length));
    assert.equal(cells.length, 1 + py.results[0].token_ids[0].length, "a heatmap row per target token");
    const [{ ids }] = await runPython([{ op: "tokenize", tokenizer: path.join(MODEL_DIR, "tokenizer.json"), texts: [text] }]);
    assert.ok(cells.every((n) => n === 1 + ids[0].length + 1), "a heatmap column per source token and EOS");
  });

  test("a fixed list, batched, against Python and against onnxruntime-web's kernels in Node", async (t) => {
    assert.ok(texts.length >= 350, `only ${texts.length} inputs`);
    const translators = {};
    for (const [k, [computeType, options]] of CONFIGS.entries()) {
      const js = await page.evaluate(async ([list, computeType, options]) => {
        const { Translator } = await import("/web/src/browser.js");
        window.translators ??= {};
        window.translators[computeType] ??= await Translator.load("/models/numbers-en-de", { computeType });
        return window.translators[computeType].translateBatch(list, { ...options, returnScores: true });
      }, [texts, computeType, options]);
      const label = `browser ${computeType} ${JSON.stringify(options)}`;
      const diff = await assertSameTranslations(js, python[k].results, texts, { model: MODEL_DIR, computeType,
        options: pythonOptions(options), label });
      t.diagnostic(`${label}: ${texts.length} inputs as Python's up to ties, max |score diff| ${diff.toExponential(2)}`);
      if (computeType === "int8") {
        translators[computeType] ??= await Translator.open(wasmInNode, MODEL_DIR, { computeType });
        const wasm = await translators[computeType].translateBatch(texts, { ...options, returnScores: true });
        assert.deepEqual(js, wasm, `${label}: the browser and onnxruntime-web in Node differ`);
      }
    }
  });

  test("broken packages are refused in the browser as in Node", async () => {
    for (const [name, [, want]] of Object.entries(BROKEN)) {
      const url = `/test-packages/${name.replace(/[^a-z0-9]+/gi, "-")}`;
      const got = await page.evaluate(async (url) => {
        const { Translator } = await import("/web/src/browser.js");
        try {
          const t = await Translator.load(url, { computeType: "int8" });
          return { translation: await t.translate("seven") };
        } catch (e) {
          return { error: e.name, message: e.message };
        }
      }, url);
      if (want === null) {
        assert.deepEqual(got, { translation: "sieben" });
      } else {
        assert.equal(got.error, "ModelPackageError", `${name}: ${JSON.stringify(got)}`);
        assert.match(got.message, want);
      }
    }
  });

  test("a format_version 2 package (fixed-capacity cache): the browser gives onnxruntime-web's results in Node", async () => {
    const some = texts.filter((_, i) => i % 10 === 0);
    for (const [computeType, options] of [["float32", { beamSize: 1 }], ["int8", { beamSize: 4, numHypotheses: 2 }]]) {
      const js = await page.evaluate(async ([list, computeType, options]) => {
        const { Translator } = await import("/web/src/browser.js");
        const t = await Translator.load("/test-packages/format-2", { computeType, onWarning: () => {} });
        return t.translateBatch(list, { ...options, returnScores: true });
      }, [some, computeType, options]);
      const t = await Translator.open(wasmInNode, path.join(broken, "format-2"), { computeType, onWarning: () => {} });
      assert.deepEqual(js, await t.translateBatch(some, { ...options, returnScores: true }));
      assert.ok(js.some((r) => r.tokenIds[0].length > 32), "some hypothesis outgrows two cache capacities");
    }
  });

  test("a screenshot of the page", async () => {
    await typeAndTranslate(page, "three hundred and forty-two");
    mkdirSync(path.dirname(SCREENSHOT), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    assert.ok(existsSync(SCREENSHOT));
  });
});
