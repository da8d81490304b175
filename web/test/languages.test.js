// Languages and generation defaults of a format_version 3 package (src/manifest_records.js, translator.js) against the
// Python runtime (runtime/translator.py _languages, _decoding): copies of the shipped model whose manifests declare
// languages as a Marian multilingual model does (a target tag before the source) and as NLLB does (a source language
// token, a forced first target token), and generation defaults; Node's translations equal Python's (compare.js).
import assert from "node:assert/strict";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { FORMAT_3_DEFAULTS } from "../src/config.js";
import { Translator } from "../src/index.js";
import { assertSameTranslations } from "./compare.js";
import { MODEL_DIR, numberTexts, pythonOptions, runPython } from "./python.js";

const work = mkdtempSync(path.join(tmpdir(), "seq2onnx-web-languages-"));
const original = JSON.parse(readFileSync(path.join(MODEL_DIR, "manifest.json"), "utf8"));
// language tokens are ordinary pieces of the numbers vocabulary: what matters is that both runtimes place them alike
const PACKAGES = {
  marian: { languages: { source: ["en"], target: ["de", "nl"], tokens: { de: "▁hundred", nl: "▁and" }, target_token: "source_prefix" } },
  nllb: { languages: { source: ["en", "de"], target: ["en", "de"], tokens: { en: "▁thousand", de: "tausend" }, source_token: true,
    target_token: "forced_bos", default_source: "en" } },
  // no languages (undefined: not written), though the shipped package records en -> de
  generation: { languages: undefined, generation: { beam_size: 2, num_hypotheses: 2, max_decoding_length: 8, suppress_ids: [0, 1, 97], no_repeat_ngram_size: 2 } },
};
// package -> the calls compared with Python
const CALLS = {
  marian: [{ targetLang: "nl" }, { targetLang: "de", beamSize: 1 }],
  nllb: [{ targetLang: "de" }, { sourceLang: "de", targetLang: "en", beamSize: 1 }],
  generation: [{}, { beamSize: 1, numHypotheses: 1 }],
};
const dirs = {}, translators = {};
let texts;

before(async () => {
  for (const [name, fields] of Object.entries(PACKAGES)) {
    const dir = (dirs[name] = path.join(work, name));
    cpSync(MODEL_DIR, dir, { recursive: true });
    // format 3's fields; the shipped package's own version where it is later (its graphs follow that one's contract)
    const manifest = { ...original, format_version: Math.max(3, original.format_version),
      config: { ...original.config, ...FORMAT_3_DEFAULTS }, ...fields };
    writeFileSync(path.join(dir, "manifest.json"), JSON.stringify(manifest, null, 1));
    translators[name] = await Translator.load(dir, { computeType: "float32" });
  }
  texts = [...(await numberTexts(Array.from({ length: 60 }, (_, i) => i * 17), ["canonical"])), "", "seven seven seven"];
});
after(() => rmSync(work, { recursive: true, force: true }));

test("Node equals Python with sourceLang / targetLang and with the package's generation defaults", async (t) => {
  const jobs = Object.entries(CALLS).flatMap(([name, calls]) => calls.map((options) => ({ op: "translate", model: dirs[name],
    compute_type: "float32", texts, options: pythonOptions(options) })));
  const py = await runPython(jobs);
  let k = 0;
  for (const [name, calls] of Object.entries(CALLS)) {
    for (const options of calls) {
      const js = await translators[name].translateBatch(texts, { ...options, returnScores: true });
      await assertSameTranslations(js, py[k++].results, texts, { model: dirs[name], computeType: "float32",
        options: pythonOptions(options), label: `${name} ${JSON.stringify(options)}` });
      t.diagnostic(`${name} ${JSON.stringify(options)}: ${texts.length} inputs as Python's`);
    }
  }
});

test("the languages reach the model: a target tag before the source, a source token, a forced first target token", async () => {
  const marian = translators.marian, nllb = translators.nllb;
  const [nl, de] = [await marian.translateBatch(texts, { targetLang: "nl" }), await marian.translateBatch(texts, { targetLang: "de" })];
  assert.ok(nl.some((r, i) => r.hypotheses[0] !== de[i].hypotheses[0]), "the target tag changes no translation");
  const forced = nllb.package.languageIds;
  for (const [targetLang, id] of [["de", forced.de], ["en", forced.en]]) {
    const out = await nllb.translateBatch(texts.slice(0, 5), { targetLang, returnScores: true });
    for (const r of out) assert.equal(r.tokenIds[0][0], id, `targetLang ${targetLang}: the first token is not forced`);
  }
  const pieces = [];
  for await (const piece of marian.generateTokens("three hundred", { targetLang: "nl" })) pieces.push(piece);
  assert.equal(pieces.join(""), await marian.translate("three hundred", { targetLang: "nl" }));
});

test("the generation defaults apply, and the call's options override them", async () => {
  const t = translators.generation;
  const [r] = await t.translateBatch(["seven hundred and seven"]);
  assert.equal(r.tokenIds.length, 2, "num_hypotheses 2 of the package");
  assert.ok(r.tokenIds.every((ids) => !ids.includes(97) && ids.length <= 8), "suppress_ids / max_decoding_length ignored");
  const [one] = await t.translateBatch(["seven hundred and seven"], { beamSize: 1, numHypotheses: 1 });
  assert.equal(one.tokenIds.length, 1);
});

test("a language a call names wrongly, or omits where the model needs one, is one line", async () => {
  const marian = translators.marian;
  await assert.rejects(marian.translate("one"), { name: "RangeError", message: "targetLang is needed: this model translates into 2 languages (de, nl)" });
  await assert.rejects(marian.translate("one", { targetLang: "fr" }),
    { name: "RangeError", message: 'targetLang "fr" is not a target language of this model; it has de, nl (seq2onnx info MODEL lists them)' });
  await assert.rejects(marian.translate("one", { sourceLang: 3 }), { name: "TypeError", message: "sourceLang must be a language code (a string), got number" });
  await assert.rejects(translators.generation.translate("one", { targetLang: "de" }),
    /targetLang cannot be checked: this model's package records no languages/);
  const shipped = await Translator.load(MODEL_DIR); // it records en -> de (seq2onnx export --source-lang en --target-lang de)
  assert.deepEqual(await shipped.translate("one", { sourceLang: "en", targetLang: "de" }), await shipped.translate("one"));
  await assert.rejects(shipped.translate("one", { targetLang: "fr" }), /targetLang "fr" is not a target language of this model; it has de/);
  const steps = marian.generateTokens("one", { targetLang: "xx" });
  await assert.rejects(steps.next(), /targetLang "xx" is not a target language of this model/);
});
