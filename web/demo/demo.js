// The demo page: load the int8 variant of models/numbers-en-de (served from the repository's models/ folder),
// translate what is typed, show the n-best list with scores and the best translation's attention heatmap.
// window.demo exposes the translator and the timings to the browser test and to bench.mjs.
import { Translator } from "../src/browser.js";

const MODEL = new URL("../../models/numbers-en-de", location.href).href;
const $ = (id) => document.getElementById(id);
const demo = (window.demo = { translator: null, timings: {}, error: null, translations: 0 });

function show(text, scores, normalized) {
  $("best").textContent = text[0] || "\u00a0";
  $("nbest-table").querySelector("tbody").replaceChildren(...text.map((hyp, i) => {
    const row = document.createElement("tr");
    if (i === 0) row.className = "top";
    for (const [value, cls] of [[i + 1, "num"], [hyp || "(empty)", "hyp"], [scores[i].toFixed(4), "num"], [normalized[i].toFixed(4), "num"]]) {
      const cell = document.createElement("td");
      cell.textContent = value;
      cell.className = cls;
      row.append(cell);
    }
    return row;
  }));
}

/** The best hypothesis's cross-attention as a table: a row per target piece, a column per source piece (EOS
 * included); each cell's shade is its weight (a row sums to 1), weights >= 0.1 written in it. */
function showAttention(text, tokenIds, attention) {
  const table = $("attention");
  const sourcePieces = demo.translator.pieces(demo.translator.sourceIds(text));
  const targetPieces = demo.translator.pieces(tokenIds);
  const cell = (tag, content, cls) => {
    const c = document.createElement(tag);
    c.textContent = content;
    if (cls) c.className = cls;
    return c;
  };
  const head = document.createElement("tr");
  head.append(cell("th", ""), ...sourcePieces.map((p) => cell("th", p.replace(/^\u2581/, ""), "src")));
  const rows = attention.map((weights, t) => {
    const row = document.createElement("tr");
    row.append(cell("th", targetPieces[t].replace(/^\u2581/, ""), "tgt"));
    for (const w of weights) {
      const c = cell("td", w >= 0.1 ? w.toFixed(2) : "", "w");
      c.style.background = `rgba(53, 85, 212, ${w.toFixed(3)})`;
      if (w >= 0.5) c.style.color = "#fff";
      c.title = w.toFixed(4);
      row.append(c);
    }
    return row;
  });
  table.replaceChildren(head, ...rows);
  $("attention-section").hidden = attention.length === 0;
}

async function translate() {
  const text = $("text").value;
  const beamSize = Number($("beam").value);
  const numHypotheses = Math.min(Number($("nbest").value), beamSize);
  const start = performance.now();
  const [r] = await demo.translator.translateBatch([text], { beamSize, numHypotheses, returnScores: true, returnAttention: true });
  const ms = performance.now() - start;
  show(r.hypotheses, r.scores, r.normalizedScores);
  showAttention(text, r.tokenIds[0], r.attention[0]);
  demo.timings.firstTranslationMs ??= performance.now(); // since the page's navigation started
  demo.lastResult = r;
  demo.lastText = text;
  demo.translations += 1;
  $("status").textContent = `beam ${beamSize}, ${r.tokenIds[0].length} tokens in ${ms.toFixed(1)} ms · model loaded and ` +
    `checked in ${(demo.timings.loadedMs - demo.timings.loadStartMs).toFixed(0)} ms · first translation ` +
    `${(demo.timings.firstTranslationMs / 1000).toFixed(2)} s after the page was opened`;
  return r;
}

async function main() {
  demo.timings.loadStartMs = performance.now();
  demo.translator = await Translator.load(MODEL, { computeType: "int8" });
  demo.timings.loadedMs = performance.now();
  const pkg = demo.translator.package;
  const files = [pkg.variants.int8.encoder, pkg.variants.int8.decoderStep, ...pkg.tokenizerFiles];
  const kb = files.reduce((sum, f) => sum + pkg.manifest.files[f].bytes, 0) / 1024;
  $("about").textContent = `Model ${MODEL.split("/").pop()} · variant ${demo.translator.variant} · ` +
    `${pkg.config.encoder_layers}+${pkg.config.decoder_layers} layers, d_model ${pkg.config.d_model}, ` +
    `vocabulary ${pkg.config.vocab_size} · ${kb.toFixed(0)} KiB of graphs and tokenizer, each file's SHA-256 ` +
    "checked against manifest.json before use.";
  $("go").disabled = false;
  await translate();
  demo.ready = true;
}

$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  if (demo.translator) translate().catch(fail);
});
for (const chip of document.querySelectorAll(".chip")) {
  chip.addEventListener("click", () => {
    $("text").value = chip.textContent;
    if (demo.translator) translate().catch(fail);
  });
}
for (const id of ["beam", "nbest"]) $(id).addEventListener("change", () => demo.translator && translate().catch(fail));

function fail(e) {
  demo.error = String(e?.message ?? e);
  $("status").textContent = demo.error;
  $("status").className = "status error";
}

main().catch(fail);
