// The package checks (src/manifest.js, engine.js, tokenizer.js) against the Python runtime's: broken copies of the
// shipped package, one fault each; the JS runtime refuses each with one ModelPackageError line naming the fault,
// and the Python runtime (test/python_reference.py "load") refuses the same folder. The intact copy loads in both.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, truncateSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { FORMAT_3_DEFAULTS } from "../src/config.js";
import { ModelPackageError, readPackage, Translator } from "../src/index.js";
import { hasExternalData } from "../src/onnx_bytes.js";
import { nodePlatform } from "../src/platform_node.js";
import { EARLIER_CONTRACT, MODEL_DIR, runPython } from "./python.js";

const work = mkdtempSync(path.join(tmpdir(), "seq2onnx-web-manifest-"));
const original = JSON.parse(readFileSync(path.join(MODEL_DIR, "manifest.json"), "utf8"));
const clone = () => structuredClone(original);
/** The shipped manifest as format_version 3 or later writes it (the shipped one's own version where it is later: its
 * graphs follow that version's decoder step contract): ModelConfig's variant fields at their defaults, and `changes`. */
const v3 = (changes = {}) => {
  const m = clone();
  Object.assign(m, { format_version: Math.max(3, m.format_version), config: { ...m.config, ...FORMAT_3_DEFAULTS } }, changes);
  return m;
};
/** v3 with languages: a source language and two targets given as tokens before the source (Marian's >>nl<<). */
const LANGUAGES = { source: ["en"], target: ["de", "nl"], tokens: { de: "▁hundred", nl: "▁and" }, target_token: "source_prefix" };
const withLanguages = (changes) => v3({ languages: { ...LANGUAGES, ...changes } });
const sha256 = (data) => createHash("sha256").update(data).digest("hex");

/** Rewrite `name` in the package folder and its size and SHA-256 in the manifest `m`. */
function replaceFile(dir, m, name, data) {
  writeFileSync(path.join(dir, name), data);
  m.files[name] = { sha256: sha256(data), bytes: Buffer.byteLength(data) };
}

/** A variant's few_rows entry (docs/CONTRACTS.md) naming the int8 step itself, with `changes`. */
function fewRows(changes = {}) {
  return { decoder_step: "decoder_step.int8.onnx", max_rows: 4, min_onnxruntime: "1.22", ...changes };
}

function tokenizerJson() {
  return JSON.parse(readFileSync(path.join(MODEL_DIR, "tokenizer.json"), "utf8"));
}

// name -> [change(dir) -> manifest text or object to write (null: leave it), what the JS error must say, options]
const CASES = {
  "intact package": [() => null, null],
  "not a seq2onnx manifest": [() => ({ ...clone(), format: "other" }), /format is 'other', not 'seq2onnx-model'/],
  "a newer format_version": [() => ({ ...clone(), format_version: 5 }), /format_version 5 is unknown; this runtime reads format_version 1, 2, 3 and 4: upgrade/],
  "format_version as a string": [() => ({ ...clone(), format_version: "1" }), /format_version '1' is unknown/],
  "format_version 4.0": [() => JSON.stringify(clone()).replace('"format_version":4', '"format_version":4.0'), /format_version 4\.0 is unknown/],
  "format_version true": [() => ({ ...clone(), format_version: true }), /format_version True is unknown/],
  "a config field missing": [() => { const m = clone(); delete m.config.d_ff; return m; }, /the field config\.d_ff is missing/],
  "vocab_size 200.0": [() => JSON.stringify(clone()).replace('"vocab_size":200,"d_model"', '"vocab_size":200.0,"d_model"'), /vocab_size must be an integer/],
  "an unknown config field": [() => { const m = clone(); m.config.extra = 1; return m; }, /unknown ModelConfig fields: extra/],
  "d_model not divisible by n_heads": [() => { const m = clone(); m.config.n_heads = 3; return m; }, /divisible by n_heads/],
  "a special id past the vocabulary": [() => { const m = clone(); m.config.pad_id = 500; return m; }, /pad_id must be below vocab_size/],
  "dropout 1": [() => { const m = clone(); m.config.dropout = 1; return m; }, /dropout and attention_dropout must be in \[0, 1\)/],
  "a bool as 0": [() => { const m = clone(); m.config.norm_first = 0; return m; }, /norm_first must be true or false/],
  "heads that do not match the graphs": [() => { const m = clone(); m.config.n_heads = 8; return m; }, /cross_key_0 is float32 .* want float32 \[.*8.*16\]/],
  "a file name with a path": [() => { const m = clone(); m.files["../encoder.onnx"] = m.files["encoder.onnx"]; return m; }, /bad file name '\.\.\/encoder\.onnx'/],
  "a listed file missing": [(dir) => { unlinkSync(path.join(dir, "README.md")); return null; }, /README\.md is missing \(listed in manifest\.json\)/],
  "a file of another size": [() => { const m = clone(); m.files["README.md"].bytes += 1; return m; }, new RegExp(`README\\.md has ${original.files["README.md"].bytes} bytes, manifest\\.json says ${original.files["README.md"].bytes + 1}`)],
  "a sha256 that is no hex": [() => { const m = clone(); m.files["README.md"].sha256 = "x".repeat(64); return m; }, /'sha256' of 64 hex digits/],
  "bytes as a bool": [() => { const m = clone(); m.files["README.md"].bytes = true; return m; }, /files\['README\.md'\]\['bytes'\] should be an integer, got True/],
  "a corrupted tokenizer": [(dir) => {
    const data = readFileSync(path.join(dir, "tokenizer.json"));
    data[100] ^= 1;
    writeFileSync(path.join(dir, "tokenizer.json"), data);
    return null;
  }, /tokenizer\.json: its SHA-256 does not match manifest\.json/],
  "a corrupted graph": [(dir) => {
    const data = readFileSync(path.join(dir, "decoder_step.onnx"));
    data[data.length - 10] ^= 1;
    writeFileSync(path.join(dir, "decoder_step.onnx"), data);
    return null;
  }, /decoder_step\.onnx: its SHA-256 does not match manifest\.json/],
  "a graph that is a symbolic link": [(dir) => {
    unlinkSync(path.join(dir, "encoder.onnx"));
    symlinkSync(path.join(MODEL_DIR, "encoder.onnx"), path.join(dir, "encoder.onnx"));
    return null;
  }, /encoder\.onnx is a symbolic link/],
  "no fp32 variant": [() => { const m = clone(); delete m.variants.fp32; return m; }, /no 'fp32' variant/],
  "a variant naming an unlisted file": [() => { const m = clone(); m.variants.fp32.encoder = "other.onnx"; return m; }, /variants\['fp32'\]\['encoder'\] = 'other\.onnx' is not a file listed/],
  "an unknown variant status": [() => { const m = clone(); m.variants.int8.status = "bogus"; return m; }, /\['status'\] should be one of checked, validation-skipped, unchecked-on-CUDA/],
  "cross_per_sentence as a string": [() => { const m = clone(); m.graphs.decoder_step.cross_per_sentence = "yes"; return m; }, /graphs\.decoder_step\.cross_per_sentence should be true or false/],
  "cross_per_sentence on a graph without a sentence axis": [(dir) => {
    cpSync(EARLIER_CONTRACT, dir, { recursive: true });
    const m = JSON.parse(readFileSync(path.join(EARLIER_CONTRACT, "manifest.json"), "utf8"));
    m.graphs.decoder_step.cross_per_sentence = true;
    return m;
  }, /the manifest says the decoder step takes cross K\/V once per sentence, but the graph's encoder_attention_mask and input_ids share the batch axis 'batch'/],
  "a special token of another id": [() => { const m = clone(); m.special_tokens.eos = "<s>"; return m; }, /special token eos='<s>' has id 1, the config says 2/],
  "a manifest vocab_size of another tokenizer": [() => ({ ...clone(), vocab_size: 201 }), /tokenizer does not belong to this model/],
  "a tokenizer with a post-processor": [(dir) => {
    const m = clone(), t = tokenizerJson();
    t.post_processor = { type: "TemplateProcessing", single: [{ Sequence: { id: "A", type_id: 0 } }], pair: [], special_tokens: {} };
    replaceFile(dir, m, "tokenizer.json", JSON.stringify(t));
    return m;
  }, /has a post-processor/],
  "a tokenizer of another vocabulary": [(dir) => {
    const m = clone(), t = tokenizerJson();
    t.model.vocab.extra_piece = 200;
    replaceFile(dir, m, "tokenizer.json", JSON.stringify(t));
    return m;
  }, /has 201 tokens but the model config has vocab_size 200/],
  "a tokenizer with a gap in its ids": [(dir) => {
    const m = clone(), t = tokenizerJson();
    const [token] = Object.entries(t.model.vocab).find(([, id]) => id === 150);
    t.model.vocab[token] = 250;
    replaceFile(dir, m, "tokenizer.json", JSON.stringify(t));
    return m;
  }, /its token ids are not exactly 0\.\.199/],
  "a tokenizer that is not JSON": [(dir) => { const m = clone(); replaceFile(dir, m, "tokenizer.json", "{not json"); return m; }, /tokenizer\.json is not a tokenizers JSON file/],
  "the encoder in the decoder's place": [(dir) => {
    const m = clone();
    replaceFile(dir, m, "decoder_step.onnx", readFileSync(path.join(MODEL_DIR, "encoder.onnx")));
    return m;
  }, /decoder_step\.onnx: graph inputs\/outputs .* do not match the decoder_step contract of decoder format 3/],
  "a graph that is no ONNX model": [(dir) => { const m = clone(); replaceFile(dir, m, "encoder.onnx", Buffer.from([0x08, 0x80])); return m; }, /encoder\.onnx is not a valid ONNX model/],
  "a manifest that is not JSON": [() => "{\"format\": ", /manifest\.json is not valid JSON/],
  "a manifest with a byte-order mark": [() => `\ufeff${JSON.stringify(clone())}`, /manifest\.json is not valid JSON/],
  "a manifest nested too deep": [() => {
    const m = clone();
    let deep = {};
    for (let i = 0; i < 40; i++) deep = { d: deep };
    m.source_checkpoint.train_meta = deep;
    return m;
  }, /nests lists and objects more than 32 levels deep/],
  "a string over 4096 characters": [() => ({ ...clone(), created: "x".repeat(5000) }), /holds a string of 5000 characters .*more than a manifest's 4096/],
  "a key over 4096 characters": [() => { const m = clone(); m.exporter["k".repeat(5000)] = "1"; return m; }, /holds a string of 5000 characters/],
  "33 variants": [() => {
    const m = clone();
    for (let i = 0; i < 32; i++) m.variants[`v${i}`] = m.variants.fp32;
    return m;
  }, /'variants' has 34 entries, more than a package holds \(32\)/],
  "over 64 files": [() => {
    const m = clone();
    for (let i = 0; i < 65; i++) m.files[`f${i}.onnx`] = m.files["encoder.onnx"];
    return m;
  }, /'files' has 7\d entries, more than a package holds \(64\)/],
  "a manifest over 1 MiB": [() => ({ ...clone(), created: "x".repeat(2 ** 20) }), /has more than 1048576 bytes/],
  "an exporter version that is no string": [() => { const m = clone(); m.exporter.torch = 2; return m; }, /exporter\['torch'\] should be a string, got 2/],
  "an opset that is no integer": [() => ({ ...clone(), opset: "18" }), /the field opset should be an integer, got '18'/],
  "no manifest": [(dir) => { unlinkSync(path.join(dir, "manifest.json")); return null; }, /manifest\.json is missing: .* is not a seq2onnx model package/],
  "a few-rows step (the int8 step itself)": [() => { const m = clone(); m.variants.int8.few_rows = fewRows(); return m; }, null, { computeType: "int8" }],
  "a few-rows step naming an unlisted file": [() => { const m = clone(); m.variants.int8.few_rows = fewRows({ decoder_step: "other.onnx" }); return m; }, /variants\['int8'\]\['few_rows'\]\['decoder_step'\] = 'other\.onnx' is not a file listed/],
  "a few-rows max_rows of 0": [() => { const m = clone(); m.variants.int8.few_rows = fewRows({ max_rows: 0 }); return m; }, /\['few_rows'\]\['max_rows'\] should be in \[1, 65536\], got 0/],
  "a few-rows step without min_onnxruntime": [() => { const m = clone(); m.variants.int8.few_rows = fewRows({ min_onnxruntime: undefined }); return m; }, /the field variants\['int8'\]\['few_rows'\]\['min_onnxruntime'\] is missing/],
  "a few-rows step that is the encoder": [() => { const m = clone(); m.variants.int8.few_rows = fewRows({ decoder_step: "encoder.int8.onnx" }); return m; }, /encoder\.int8\.onnx: graph inputs\/outputs .* do not match the decoder_step contract/, { computeType: "int8" }],
  // format_version 3 (runtime/package/manifest.py, manifest_records.py)
  "format 3 with its config fields, two tokenizer names, languages and generation defaults": [() => v3({
    tokenizer: { source: "tokenizer.json", target: "tokenizer.json" }, languages: { source: ["en"], target: ["de"] },
    generation: { beam_size: 2, suppress_ids: [0, 1, 5] } }), null],
  "format 3 without a config field of format 3": [() => { const m = v3(); delete m.config.sinusoid; return m; }, /the field config\.sinusoid is missing/],
  "an activation of no choice": [() => v3({ config: { ...v3().config, activation: "tanh" } }), /activation must be one of relu, gelu, swish, got 'tanh'/],
  "a position_offset past its range": [() => v3({ config: { ...v3().config, position_offset: -1 } }), /position_offset must be an integer in \[0, 16777216\], got -1/],
  "embed_scale as 1": [() => v3({ config: { ...v3().config, embed_scale: 1 } }), /embed_scale must be true or false, got 1/],
  "decoder_start_id past the vocabulary": [() => v3({ config: { ...v3().config, decoder_start_id: 200 } }), /decoder_start_id must be below vocab_size \(200\), got 200/],
  "a source vocabulary of its own with shared embeddings": [() => v3({ config: { ...v3().config, src_vocab_size: 150 } }), /share_embeddings needs src_vocab_size == vocab_size, got 150 and 200/],
  "a source vocabulary of its own that the tokenizer lacks": [() => v3({ config: { ...v3().config, src_vocab_size: 150, share_embeddings: false, tie_output_embedding: false } }),
    /tokenizer\.json has 200 tokens but the model config has src_vocab_size 150/],
  "a tokenizer object with a third key": [() => v3({ tokenizer: { source: "tokenizer.json", target: "tokenizer.json", extra: "x" } }), /the field tokenizer should be a file name or \{"source": file, "target": file\}/],
  "a tokenizer that is a number": [() => v3({ tokenizer: 5 }), /the field tokenizer should be a file name or an object, got 5/],
  "a target tokenizer not listed": [() => v3({ tokenizer: { source: "tokenizer.json", target: "target.json" } }), /the tokenizer 'target\.json' is not listed in 'files'/],
  "languages as a list": [() => v3({ languages: ["en"] }), /the field languages should be an object, got \['en'\]|the field languages should be an object/],
  "a language field this runtime does not know": [() => withLanguages({ script: "Latn" }), /the field languages\.script should be absent \(this runtime does not know it\)/],
  "a language code with a space": [() => withLanguages({ source: ["e n"] }), /the field languages\.source should be a list of at most 4096 language codes/],
  "a language token for a code not listed": [() => withLanguages({ tokens: { ...LANGUAGES.tokens, fr: "▁and" } }), /the field languages\.tokens should be an object from the model's language codes to tokens/],
  "a target language without its token": [() => withLanguages({ tokens: { de: "▁hundred" } }), /languages\.tokens should be a token for each language \(none for 'nl'\)/],
  "a language token not in the vocabulary": [() => withLanguages({ tokens: { de: "▁hundred", nl: ">>nl<<" } }), /languages\.tokens\['nl'\] = '>>nl<<' is not a token of the source tokenizer/],
  "an unknown target_token": [() => withLanguages({ target_token: "prefix" }), /the field languages\.target_token should be null or one of source_prefix, forced_bos, got 'prefix'/],
  "a target_token of 80 characters": [() => withLanguages({ target_token: "p".repeat(80) }), /the field languages\.target_token should be null or one of source_prefix, forced_bos, got 'p{59}\.\.\.;/],
  "a default target not listed": [() => withLanguages({ default_target: "fr" }), /the field languages\.default_target should be null or one of languages\.target, got 'fr'/],
  "an unknown generation field": [() => v3({ generation: { num_beams: 4 } }), /the field generation\.num_beams should be one of the decoding options \(beam_size, /],
  "a generation beam_size of 0": [() => v3({ generation: { beam_size: 0 } }), /the field generation holds a bad decoding option \(beamSize must be an integer in \[1, 256\], got 0\)/],
  "a generation beam_size of 4.0": [() => JSON.stringify(v3({ generation: { beam_size: 4 } })).replace('"beam_size":4', '"beam_size":4.0'), /the field generation holds a bad decoding option \(beamSize must be an integer/],
  "a generation length_penalty of 1.0": [() => JSON.stringify(v3({ generation: { length_penalty: 1 } })).replace('"length_penalty":1', '"length_penalty":1.0'), null],
  "generation early_stopping under seq2onnx beam rules": [() => v3({ generation: { early_stopping: true } }), /the field generation holds a bad decoding option \(earlyStopping applies to beamRules='transformers' only/],
  // the fields the reader leaves to the schema (src/schema.js): named as the Python records name them
  "a graph input without its dtype": [() => { const m = clone(); delete m.graphs.encoder.inputs[0].dtype; return m; }, /the field graphs\.encoder\.inputs\[0\]\.dtype is missing/],
  "a graph shape holding true": [() => { const m = clone(); m.graphs.decoder_step.outputs[0].shape = [true]; return m; }, /the field graphs\.decoder_step\.outputs\[0\]\.shape\[0\] should be an integer or a string, got True/],
  "a variant's checked_on that is a number": [() => { const m = clone(); m.variants.fp32.checked_on = 1; return m; }, /the field variants\['fp32'\]\.checked_on should be a string, got 1/],
  "a threshold that is no number": [() => { const m = clone(); m.variants.int8.thresholds = { top1_agreement: "high" }; return m; }, /the field variants\['int8'\]\.thresholds\['top1_agreement'\] should be a number, got 'high'/],
  "an attention op that is no string": [() => { const m = clone(); m.variants.int8.attention.ops = [1]; return m; }, /the field variants\['int8'\]\.attention\.ops\[0\] should be a string, got 1/],
  "source_model architectures as a string": [() => v3({ source_model: { type: "marian", architectures: "MarianMTModel" } }), /the field source_model\.architectures should be a list, got 'MarianMTModel'/],
  "an undertrained reason that is no string": [() => { const m = clone(); m.source_checkpoint.undertrained = [5]; return m; }, /the field source_checkpoint\.undertrained\[0\] should be a string, got 5/],
  "no int8 variant for computeType int8": [() => { const m = clone(); delete m.variants.int8; return m; }, /has no int8 variant; it has fp32 \(float32\)/, { computeType: "int8" }],
};

// the cases whose JS line must be Python's, word for word (the value cut as runtime/package/manifest_records.py _bad cuts it;
// the tokenizer size line with the manifest's vocab_size, as runtime/package/manifest.py _read_tokenizer writes it; the
// fields src/schema.js checks, named as the Python records name them)
const EXACT = ["a target_token of 80 characters", "a tokenizer of another vocabulary", "a graph input without its dtype",
  "a graph shape holding true", "a variant's checked_on that is a number", "a threshold that is no number",
  "an attention op that is no string", "source_model architectures as a string", "an undertrained reason that is no string"];
let python;
const dirs = {};

before(async () => {
  for (const [name, [change]] of Object.entries(CASES)) {
    const dir = (dirs[name] = path.join(work, name.replace(/[^a-z0-9]+/gi, "-")));
    cpSync(MODEL_DIR, dir, { recursive: true });
    const manifest = change(dir);
    if (manifest !== null) {
      writeFileSync(path.join(dir, "manifest.json"), typeof manifest === "string" ? manifest : JSON.stringify(manifest, null, 1));
    }
  }
  const names = Object.keys(CASES);
  const results = await runPython(names.map((name) => ({ op: "load", model: dirs[name], compute_type: CASES[name][2]?.computeType ?? "float32" })));
  python = Object.fromEntries(names.map((name, i) => [name, results[i].error]));
});
after(() => rmSync(work, { recursive: true, force: true }));

for (const [name, [, want, options = {}]] of Object.entries(CASES)) {
  test(name, async () => {
    const load = () => Translator.load(dirs[name], { computeType: options.computeType ?? "float32" });
    if (want === null) {
      const t = await load();
      assert.equal(await t.translate("seven"), "sieben");
      assert.equal(python[name], null, `Python refused it: ${python[name]}`);
      return;
    }
    await assert.rejects(load, (e) => {
      assert.ok(e instanceof ModelPackageError, `${e.name}: ${e.message}`);
      assert.match(e.message, want);
      assert.ok(!e.message.includes("\n"), "one line");
      if (EXACT.includes(name)) assert.equal(e.message, python[name]);
      return true;
    });
    assert.notEqual(python[name], null, "the Python runtime loaded what the JS runtime refused");
  });
}

test("a folder that does not exist", async () => {
  await assert.rejects(Translator.load(path.join(work, "nothing-here")), /nothing-here does not exist: pass the folder written by `seq2onnx export`/);
});

test("bad load options are refused before any work", async () => {
  await assert.rejects(Translator.load(MODEL_DIR, { computeType: "float16" }), /computeType must be one of default, float32, int8, got "float16" \(float16 runs on CUDA only/);
  await assert.rejects(Translator.load(MODEL_DIR, { intraThreads: -1 }), /intraThreads must be an integer in \[0, \d+\], got -1/);
});

test("external data in a graph is found by walking its protobuf", () => {
  assert.equal(hasExternalData(readFileSync(path.join(EARLIER_CONTRACT, "encoder.onnx"))), false); // every weight inside
  assert.equal(hasExternalData(readFileSync(path.join(MODEL_DIR, "encoder.onnx"))), true); // positions in fp32.shared.data
  // ModelProto{graph=7: GraphProto{initializer=5: TensorProto{name=8: "w", data_location=14: EXTERNAL}}}
  const tensor = Buffer.from([0x42, 0x01, 0x77, 0x70, 0x01]);
  const model = Buffer.concat([Buffer.from([0x3a, tensor.length + 2, 0x2a, tensor.length]), tensor]);
  assert.equal(hasExternalData(model), true);
  assert.throws(() => hasExternalData(Buffer.from([0x3a, 0x7f])), /runs past the end/);
});

test("two bad files: the error of the one 'files' lists first, as Python checks them in order, whichever check ends first", async () => {
  const names = Object.keys(original.files);
  const [first, last] = [names[0], names.at(-1)];
  const dir = path.join(work, "two-bad-files");
  cpSync(MODEL_DIR, dir, { recursive: true });
  unlinkSync(path.join(dir, first));
  truncateSync(path.join(dir, last), 10);
  const [{ error }] = await runPython([{ op: "load", model: dir, compute_type: "float32" }]);
  // the first file's check waits until the last one's has failed (its size known, then a turn of the event loop)
  let lastSized;
  const sized = new Promise((resolve) => { lastSized = resolve; });
  const held = { ...nodePlatform, fileSize: async (root, name, ...rest) => {
    if (name === first) await sized.then(() => new Promise((resolve) => setImmediate(resolve)));
    const size = nodePlatform.fileSize(root, name, ...rest);
    if (name === last) size.then(lastSized, lastSized);
    return size;
  } };
  await assert.rejects(readPackage(held, dir), (e) => {
    assert.ok(e instanceof ModelPackageError, `${e.name}: ${e.message}`);
    assert.equal(e.message, error);
    assert.ok(e.message.includes(`${first} is missing`), e.message);
    return true;
  });
});
