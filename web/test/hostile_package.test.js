// Hostile model folders against both runtimes: copies of the shipped package, each with one hostile tokenizer.json or
// variant entry. The JS runtime (src/tokenizer_json.js, manifest.js, engine.js) must give the Python runtime's verdict
// (test/python_reference.py "load"): both load the folder, or both refuse it, JS with one ModelPackageError or
// Seq2OnnxError line. And onnxruntime's own log cannot write a hostile graph's names to the terminal.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { Seq2OnnxError, Translator } from "../src/index.js";
import { ALLOWED_REGEXES, REGEX_COMPONENTS, THOUSANDS } from "../src/tokenizer_json.js";
import { MODEL_DIR, runPython, WEB_DIR } from "./python.js";

const work = mkdtempSync(path.join(tmpdir(), "seq2onnx-web-hostile-"));
const base = readFileSync(path.join(MODEL_DIR, "tokenizer.json"), "utf8");
const manifest = JSON.parse(readFileSync(path.join(MODEL_DIR, "manifest.json"), "utf8"));
const sha256 = (data) => createHash("sha256").update(data).digest("hex");
const S = JSON.stringify;

/** The shipped tokenizer.json, parsed, after `edit(json)`, as text. */
function edited(edit) {
  const json = JSON.parse(base);
  edit(json);
  return S(json);
}
const split = (pattern, extra = {}) => (t) => {
  t.pre_tokenizer = { type: "Split", pattern, behavior: "Isolated", invert: false, ...extra };
};
const withNormalizer = (normalizer) => (t) => t.normalizer.normalizers.push(normalizer);
const replaceIn = (from, to) => base.replace(from, to);

// name -> the tokenizer.json text. The attacker's finds (a backtracking regex; files Rust's reader refuses and the
// JS library read) and more of the same kinds; the intact file and harmless variants must load in both.
const TOKENIZERS = {
  "intact": base,
  // regular expressions: only the trainer's (runtime/package/tokenizer.py ALLOWED_REGEXES)
  "a backtracking Split regex (a+)+b": edited(split({ Regex: "(a+)+b" })),
  "a backtracking regex in a Replace decoder": edited((t) => { t.decoder = { type: "Sequence", decoders: [t.decoder, { type: "Replace", pattern: { Regex: "(\\w+\\s?)*$" }, content: "" }] }; }),
  "a backtracking regex deep in a normalizer Sequence": edited(withNormalizer({ type: "Sequence", normalizers: [{ type: "Replace", pattern: { Regex: "^(a|a)+$" }, content: "" }] })),
  "a harmless but foreign regex": edited(split({ Regex: "\\s+" })),
  "the trainer's own regex in a Split": edited(split({ Regex: THOUSANDS })),
  "a String pattern (no regex)": edited(split({ String: "(a+)+b" })),
  // what serde_json refuses and JSON.parse reads
  "a byte-order mark": `\ufeff${base}`,
  "a lone surrogate escape": edited(withNormalizer({ type: "Replace", pattern: { String: "x" }, content: "\ud800" })),
  "a number out of range": replaceIn(/"<unk>":(\d+)/, '"<unk>":1e400'),
  "nested 200 levels deep": edited((t) => { let d = {}; for (let i = 0; i < 200; i++) d = { d }; t.normalizer.normalizers[0].extra = d; }),
  // what Rust tokenizers refuses and the JS library read
  "an unknown top-level field": edited((t) => { t.extra = 1; }),
  "version 2.0": edited((t) => { t.version = "2.0"; }),
  "an id written 3.0": replaceIn(/"<unk>":(\d+)/, '"<unk>":$1.0'),
  "an id written 3.5": replaceIn(/"<unk>":(\d+)/, '"<unk>":$1.5'),
  "a negative id": edited((t) => { t.model.vocab[Object.keys(t.model.vocab)[10]] = -1; }),
  "an added token id as a string": edited((t) => { t.added_tokens[0].id = "0"; }),
  "an added token without its flags": edited((t) => { t.added_tokens[0] = { id: 0, content: "<pad>" }; }),
  "an added token flag that is no bool": edited((t) => { t.added_tokens[0].special = "yes"; }),
  "a merge of pieces not in the vocabulary": edited((t) => { t.model.merges.push(["zzq", "qqz"]); }),
  "a merge of three pieces": edited((t) => { t.model.merges.push("a b c"); }),
  "a merge of one piece": edited((t) => { t.model.merges.push(["a"]); }),
  "a BPE dropout of 2": edited((t) => { t.model.dropout = 2; }),
  "a BPE prefix that is no string": edited((t) => { t.model.continuing_subword_prefix = 5; }),
  "an unknown model type": edited((t) => { t.model.type = "Bogus"; }),
  "padding that is no padding": edited((t) => { t.padding = { bogus: 1 }; }),
  "padding without pad_token": edited((t) => { t.padding = { strategy: "BatchLongest", direction: "Left", pad_to_multiple_of: null, pad_id: 0, pad_type_id: 0 }; }),
  "truncation of length -1": edited((t) => { t.truncation = { max_length: -1 }; }),
  "a Metaspace prepend_scheme 'bogus'": edited((t) => { t.pre_tokenizer.pretokenizers[0].prepend_scheme = "bogus"; }),
  "a Metaspace decoder prepend_scheme 'bogus'": edited((t) => { t.decoder.prepend_scheme = "bogus"; }),
  "a Metaspace replacement of two characters": edited((t) => { t.pre_tokenizer.pretokenizers[0].replacement = "ab"; }),
  "a Split behavior 'Bogus'": edited(split({ String: "x" }, { behavior: "Bogus" })),
  "a Split without invert": edited((t) => { t.pre_tokenizer = { type: "Split", pattern: { String: "x" }, behavior: "Isolated" }; }),
  "a Sequence without its list": edited((t) => { t.normalizer = { type: "Sequence" }; }),
  "a Strip normalizer without strip_right": edited(withNormalizer({ type: "Strip", strip_left: true })),
  "a Digits pre-tokenizer without individual_digits": edited((t) => { t.pre_tokenizer.pretokenizers[2] = { type: "Digits" }; }),
  "a Strip decoder of a negative start": edited((t) => { t.decoder = { type: "Strip", content: " ", start: -1, stop: 0 }; }),
  "an unknown normalizer": edited(withNormalizer({ type: "Bogus" })),
  "an unknown decoder": edited((t) => { t.decoder = { type: "Bogus" }; }),
  "a Precompiled normalizer that is no charsmap": edited((t) => { t.normalizer = { type: "Precompiled", precompiled_charsmap: "!!!" }; }),
  "a trailing comma": base.replace(/\}\s*$/, ",}"),
  "NaN": replaceIn(/"<unk>":(\d+)/, '"<unk>":NaN'),
  // harmless variants both read
  "no version": edited((t) => { delete t.version; }),
  "no normalizer field": edited((t) => { delete t.normalizer; }),
  "no added_tokens field": edited((t) => { delete t.added_tokens; }),
  "a duplicate model key (the last wins)": base.replace(/^\{/, '{"model": {"type": "BPE", "vocab": {}, "merges": []},'),
  "an unknown field in a normalizer": edited((t) => { t.normalizer.normalizers[0].bogus = 1; }),
  "an unknown field in an added token": edited((t) => { t.added_tokens[0].bogus = 1; }),
  "valid padding and truncation (the runtime ignores them)": edited((t) => {
    t.padding = { strategy: { Fixed: 5 }, direction: "Left", pad_to_multiple_of: null, pad_id: 0, pad_type_id: 0, pad_token: "<pad>" };
    t.truncation = { direction: "Right", max_length: 5, strategy: "LongestFirst", stride: 0 };
  }),
  "a BPE dropout of 0.0": edited((t) => { t.model.dropout = 0; }),
};

const int8 = (attention) => () => { const m = structuredClone(manifest); m.variants.int8.attention = attention; return m; };
// name -> [manifest change, computeType]: attention.min_onnxruntime (runtime/package/manifest.py _read_variants, session.py
// check_onnxruntime): a variant whose graphs need a newer onnxruntime is refused when loaded
const VARIANTS = {
  "attention needs onnxruntime 99.0": [int8({ min_onnxruntime: "99.0" }), "int8"],
  "attention needs onnxruntime 1.0": [int8({ min_onnxruntime: "1.0" }), "int8"],
  "attention min_onnxruntime empty": [int8({ min_onnxruntime: "" }), "int8"],
  "attention min_onnxruntime in Arabic-Indic digits": [int8({ min_onnxruntime: "\u0661.\u0662\u0661" }), "int8"],
  "attention min_onnxruntime 99 as a number": [int8({ min_onnxruntime: 99 }), "int8"],
  "attention min_onnxruntime 1.x": [int8({ min_onnxruntime: "1.x" }), "int8"],
  "attention that is no object": [int8("99.0"), "int8"],
  "attention null": [int8(null), "int8"],
  "the int8 variant needs 99.0, float32 is loaded": [int8({ min_onnxruntime: "99.0" }), "float32"],
  "a few-rows step of min_onnxruntime empty": [() => {
    const m = structuredClone(manifest);
    m.variants.int8.few_rows = { decoder_step: "decoder_step.int8.onnx", max_rows: 4, min_onnxruntime: "" };
    return m;
  }, "int8"],
};

const dirs = {};
let python;

before(async () => {
  const jobs = [];
  const folder = (name, writeManifest) => {
    const dir = (dirs[name] = path.join(work, name.replace(/[^a-z0-9]+/gi, "-")));
    cpSync(MODEL_DIR, dir, { recursive: true });
    writeFileSync(path.join(dir, "manifest.json"), S(writeManifest(), null, 1));
    return dir;
  };
  for (const [name, text] of Object.entries(TOKENIZERS)) {
    const data = Buffer.from(text, "utf8");
    const dir = folder(name, () => {
      const m = structuredClone(manifest);
      m.files["tokenizer.json"] = { sha256: sha256(data), bytes: data.length };
      return m;
    });
    writeFileSync(path.join(dir, "tokenizer.json"), data);
    jobs.push({ op: "load", model: dir, compute_type: "float32" });
  }
  for (const [name, [change, computeType]] of Object.entries(VARIANTS)) {
    jobs.push({ op: "load", model: folder(name, change), compute_type: computeType });
  }
  const names = [...Object.keys(TOKENIZERS), ...Object.keys(VARIANTS)];
  const results = await runPython(jobs);
  python = Object.fromEntries(names.map((name, i) => [name, results[i].error]));
});
after(() => rmSync(work, { recursive: true, force: true }));

/** null when the JS runtime loads the folder (and translates with it), else its one-line error. */
async function jsVerdict(name, computeType = "float32") {
  let translator;
  try {
    translator = await Translator.load(dirs[name], { computeType, onWarning: () => {} });
  } catch (e) {
    assert.ok(e instanceof Seq2OnnxError, `${name}: not the runtime's error: ${e.name}: ${e.message}`);
    assert.ok(!e.message.includes("\n"), `${name}: one line: ${e.message}`);
    return e.message;
  }
  try {
    assert.equal(typeof (await translator.translate("seven")), "string");
  } finally {
    await translator.release();
  }
  return null;
}

for (const name of Object.keys(TOKENIZERS)) {
  test(`tokenizer.json, ${name}: the Python runtime's verdict`, async () => {
    const js = await jsVerdict(name);
    assert.equal(js === null, python[name] === null, `Python: ${python[name] ?? "loads it"}; JS: ${js ?? "loads it"}`);
  });
}

for (const [name, [, computeType]] of Object.entries(VARIANTS)) {
  test(`variant, ${name}: the Python runtime's verdict`, async () => {
    const js = await jsVerdict(name, computeType);
    assert.equal(js === null, python[name] === null, `Python: ${python[name] ?? "loads it"}; JS: ${js ?? "loads it"}`);
  });
}

test("the verdicts are not all alike: the hostile files are refused, the intact one loads", () => {
  assert.equal(python.intact, null);
  assert.match(python["a backtracking Split regex (a+)+b"], /regular expression '\(a\+\)\+b'/);
  assert.match(python["attention needs onnxruntime 99.0"], /needs onnxruntime >= 99\.0/);
  assert.equal(python["attention needs onnxruntime 1.0"], null);
});

test("a backtracking regex is refused at load, naming it, before any text is tokenized", async () => {
  await assert.rejects(Translator.load(dirs["a backtracking Split regex (a+)+b"]),
    /tokenizer\.json: its pre_tokenizer uses the regular expression '\(a\+\)\+b', which seq2onnx's tokenizer never writes/);
  await assert.rejects(Translator.load(dirs["attention needs onnxruntime 99.0"], { computeType: "int8" }),
    /the int8 variant needs onnxruntime >= 99\.0 \(its graphs use onnxruntime's fused attention ops\), this is \d+\.\d+\.\d+: npm install "onnxruntime-node@>=99\.0"/);
});

test("the JS list of allowed regular expressions is the Python runtime's", async () => {
  const [rules] = await runPython([{ op: "tokenizer_rules" }]);
  assert.deepEqual(ALLOWED_REGEXES, rules.allowed_regexes);
  assert.deepEqual(REGEX_COMPONENTS, rules.regex_components);
});

test("onnxruntime's load warning does not print a hostile initializer name to the terminal", () => {
  // a second GraphProto (field 7) after the model's own: protobuf merges it into the graph, adding one unused
  // initializer (field 5: TensorProto dims=[1], FLOAT, name, 4 raw bytes) whose name holds escape sequences
  const evil = Buffer.from("\x1b]0;PWNED\x07\x1b[2J\x1b[31mFAKE ERROR", "latin1");
  const tensor = Buffer.concat([Buffer.from([0x08, 0x01, 0x10, 0x01, 0x42, evil.length]), evil, Buffer.from([0x4a, 0x04, 0, 0, 0, 0])]);
  const graph = Buffer.concat([Buffer.from([0x2a, tensor.length]), tensor]);
  const encoder = Buffer.concat([readFileSync(path.join(MODEL_DIR, "encoder.onnx")), Buffer.from([0x3a, graph.length]), graph]);
  const dir = path.join(work, "evil-initializer");
  cpSync(MODEL_DIR, dir, { recursive: true });
  writeFileSync(path.join(dir, "encoder.onnx"), encoder);
  const m = structuredClone(manifest);
  m.files["encoder.onnx"] = { sha256: sha256(encoder), bytes: encoder.length };
  writeFileSync(path.join(dir, "manifest.json"), S(m));
  const script = `import { Translator } from "./src/index.js";
    const t = await Translator.load(${S(dir)}); console.log(await t.translate("seven"));`;
  const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], { cwd: WEB_DIR, encoding: "latin1" });
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stdout.trim(), "sieben"); // the graph still loads and translates
  assert.ok(!run.stderr.includes("\x1b") && !run.stdout.includes("\x1b"), `raw escape sequences: ${S(run.stderr)}`);
});
