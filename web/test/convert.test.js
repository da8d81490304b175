// A converted package runs in Node as in Python (issue 32): tiny HF folders (tests/hf_folders.py: OPUS-MT with a
// joint vocabulary, with separate vocabularies, multilingual with target tags, and NLLB with source and target
// language tokens) converted in this run by `seq2onnx convert`'s own pipeline (python_reference.py "convert_hf"),
// then translated by the JS runtime at the package's generation defaults (transformers' beam rules, suppressed ids,
// forced EOS, ...) and with the call's languages: the same ids up to ties and scores within the bound derived from
// the weights (compare.js), the same texts, as the Python runtime's.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { Translator } from "../src/index.js";
import { assertSameTranslations } from "./compare.js";
import { pythonOptions, runPython } from "./python.js";

// the joint-vocabulary Marian and M2M100 are compared with transformers in tests/export/test_hf_convert.py; here the kinds
// whose JS paths differ (two tokenizers; a target tag; source and forced target language tokens), for CI's time
const KINDS = ["marian_separate", "marian_multilingual", "nllb"];
const TEXTS = 40; // English source lines per package (the text its tokenizers were trained on), and odd ones:
const ODD = ["", "Hello, World!", "ÄÖÜ ½ １２３ e\u0301", "</s> <pad> >>fra<< eng_Latn", "a\tb\u00a0c"];
const work = mkdtempSync(path.join(tmpdir(), "seq2onnx-web-convert-"));
const packages = {}, translators = {};
let texts;

before(async () => {
  const built = await runPython(KINDS.map((kind) => ({ op: "convert_hf", kind, work, texts: TEXTS })), { timeoutMs: 900_000 });
  KINDS.forEach((kind, i) => (packages[kind] = built[i].path));
  texts = [...built[0].texts, ...ODD];
  for (const kind of KINDS) translators[kind] = await Translator.load(packages[kind], { computeType: "float32" });
});
after(() => rmSync(work, { recursive: true, force: true }));

/** The calls compared per package: its defaults, greedy, and each of a multilingual model's target languages. */
function calls(kind) {
  const langs = translators[kind].package.languages;
  if (kind === "marian_multilingual") return langs.target.map((targetLang) => ({ targetLang }));
  if (kind === "nllb") {
    const [source, target] = ["eng_Latn", "deu_Latn"].map((c, i) => ([langs.source, langs.target][i].includes(c) ? c : null));
    assert.ok(source && target, `the NLLB package lacks eng_Latn or deu_Latn: ${langs.source.slice(0, 5)}...`);
    return [{ sourceLang: source, targetLang: target }, { sourceLang: target, targetLang: source, beamSize: 1 }];
  }
  return [{}, { beamSize: 1 }];
}

test("the converted packages hold what the folders do: two tokenizers where Marian has two vocabularies, languages, generation defaults", () => {
  const [separate, multi, nllb] = KINDS.map((k) => translators[k].package);
  assert.notEqual(multi.targetTokenizer, null, "a joint vocabulary, still two SentencePiece models: two tokenizers");
  assert.notEqual(separate.targetTokenizer, null, "separate vocabularies: a source and a target tokenizer");
  assert.notEqual(separate.config.source_vocab_size, undefined);
  assert.equal(multi.languages.targetToken, "source_prefix");
  assert.ok(nllb.languages.sourceToken && nllb.languages.targetToken === "forced_bos");
  for (const pkg of [separate, multi, nllb]) assert.ok(Object.keys(pkg.generation).length > 0, `${pkg.root}: no generation defaults`);
});

test("Node equals Python on each converted package, at its defaults and with its languages", async (t) => {
  const jobs = KINDS.flatMap((kind) => calls(kind).map((options) => ({ kind, options })));
  const py = await runPython(jobs.map(({ kind, options }) => ({ op: "translate", model: packages[kind], compute_type: "float32",
    texts, options: pythonOptions(options) })));
  for (const [i, { kind, options }] of jobs.entries()) {
    const js = await translators[kind].translateBatch(texts, { ...options, returnScores: true });
    const diff = await assertSameTranslations(js, py[i].results, texts, { model: packages[kind], computeType: "float32",
      options: pythonOptions(options), label: `${kind} ${JSON.stringify(options)}` });
    const ended = js.filter((r) => r.finished[0] && r.tokenIds[0].length > 0).length;
    t.diagnostic(`${kind} ${JSON.stringify(options)}: ${texts.length} inputs as Python's (${ended} ended with EOS), ` +
      `max |score diff| ${diff.toExponential(2)}`);
  }
});

test("streaming a converted multilingual package gives its translation", async () => {
  const t = translators.marian_multilingual;
  for (const targetLang of t.package.languages.target) {
    const pieces = [];
    for await (const piece of t.generateTokens(texts[3], { targetLang })) pieces.push(piece);
    assert.equal(pieces.join(""), await t.translate(texts[3], { targetLang }));
  }
});
