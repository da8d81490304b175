// SentencePiece tokenizers converted to HF tokenizers JSON (OPUS-MT's: a Unigram model; NLLB's and M2M100's: BPE;
// SentencePiece's nmt_nfkc charsmap in a Precompiled normalizer, Metaspace) in JS (src/tokenizer.js with src/precompiled.js and
// src/unigram.js) against Python's `tokenizers` (Rust): the same ids and decoded text on thousands of texts -- real
// gettext text in many scripts, and every character class the charsmap rewrites (a sweep over Unicode blocks:
// full-width forms, ligatures, compatibility characters, controls, odd spaces), combining marks after many bases,
// Hangul jamo, emoji sequences, CR LF, literal special tokens. The SentencePiece models are trained in this run
// (test/tokenizer_spm.py). The library's own Precompiled (NFKC) is shown to give other ids on some of these texts.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { PrecompiledNormalizer } from "@huggingface/tokenizers";
import { ModelPackageError } from "../src/errors.js";
import { serdeNumber } from "../src/json.js";
import { Random } from "../src/random.js";
import { PackageTokenizer } from "../src/tokenizer.js";
import { ODD_LINES, pythonPath, runPython, WEB_DIR } from "./python.js";

const LANGS = ["de", "fr", "es", "ru", "el", "tr", "ja", "zh_CN", "ar", "hi", "pl", "uk", "ko", "he", "vi", "th"];
const dir = mkdtempSync(path.join(tmpdir(), "seq2onnx-web-spm-"));
let texts, tokenizers;

/** test/tokenizer_spm.py's answer to one job. */
function spmPython(job) {
  return new Promise((resolve, reject) => {
    const child = spawn(pythonPath(), [path.join(WEB_DIR, "test", "tokenizer_spm.py")], { stdio: ["pipe", "pipe", "pipe"] });
    const out = [], err = [];
    child.stdout.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.on("error", reject);
    child.on("close", (code) => (code === 0 ? resolve(JSON.parse(Buffer.concat(out).toString()))
      : reject(new Error(`tokenizer_spm.py failed: ${Buffer.concat(err).toString().trim().split("\n").slice(-3).join(" ")}`))));
    child.stdin.end(JSON.stringify(job));
  });
}

/** Texts of every kind the charsmap and the segmentation into grapheme clusters treat apart. */
function unicodeTexts() {
  const out = [];
  const blocks = [[0x0, 0x3000], [0x3000, 0x3400], [0xa000, 0xa100], [0xac00, 0xac40], [0xf900, 0xfb50], [0xfe00, 0x10000],
    [0x1d400, 0x1d800], [0x1f100, 0x1f300], [0x1f600, 0x1f650], [0x2f800, 0x2fa20], [0xe0000, 0xe0080]];
  for (const [from, to] of blocks) {
    for (let cp = from; cp < to; cp += 16) { // 16 characters a text, a space after every third
      let text = "";
      for (let c = cp; c < Math.min(cp + 16, to); c++) if (c < 0xd800 || c > 0xdfff) text += String.fromCodePoint(c) + (c % 3 ? "" : " ");
      out.push(text);
    }
  }
  const marks = ["\u0301", "\u0308", "\u0323", "\u0338", "\u20dd", "\u3099", "\u309a", "\ufe0f", "\u200d", "\u0e31", "\u093f", "\u094d"];
  const bases = ["e", "a", "O", "ｶ", "か", "ﾊ", "1", " ", "\r", "\n", "ß", "ﬁ", "Å", "한", "ᄀ", "\u1161", "😀", "👩", "\t", "Ⅻ",
    "＜", "㌀", "\u00a0", "₃"];
  for (const base of bases) for (const mark of marks) out.push(base + mark, base + mark + mark, `${base}${mark}x`, `x${base}${mark}`);
  out.push("\r\n", "a\r\nb", "ｶﾞ", "ﾊﾟ", "ｶﾞｷﾞ", "ᄀ\u1161\u11a8", "ᄀ\u1161", "👩‍👩‍👧", "🇩🇪🇫🇷", "1️⃣", "a  b   c", "  x  ",
    "x\u3000\u3000y", "\u200b\u200c\u200d", "\ufeffx", "x\u00adx", "ＡＢＣ　ｄｅｆ", "ﬃ ﬄ ﬅ", "㍻ ㎏ ㏄ ℡ №", "…‥", "¼½¾", "①⑳㉑",
    "ℌℍℎ", "ǅǈǋ Ǆ", "ﷺ ﷻ", "ﾟﾞ", "ゔ", "\u0000a", "\u0001\u0002\u007f", "\u0085x\u0085", "\u2028\u2029", "Straße ẞ", "İstanbul ı",
    "ΟΔΟΣ ὈΔΥΣΣΕΎΣ", "1,234,567.89", "x\ty", "</s> <pad> <s> <unk>", "x<unk>y", "<0x41>", "__en__ hi", ">>fra<< Bonjour",
    "eng_Latn", "▁", "▁▁x", " ▁ ", "a ▁b");
  return out;
}

before(async () => {
  const [{ texts: corpus }] = await runPython([{ op: "corpus", langs: LANGS, per_lang: 100 }]);
  texts = [...corpus, ...ODD_LINES, ...unicodeTexts()];
  ({ tokenizers } = await spmPython({ op: "make", texts: corpus, dir, vocab_size: 1500 }));
});
after(() => rmSync(dir, { recursive: true, force: true }));

const fromText = (text, file, vocabSize) => new PackageTokenizer(text, file, { vocab_size: vocabSize }, { reexport: "re-export it" });
const load = (file, vocabSize) => fromText(readFileSync(file, "utf8"), file, vocabSize);

for (const name of ["spm-converter", "from-spm", "nllb"]) {
  test(`${name} SentencePiece tokenizer: Python's ids and decoded text`, async (t) => {
    assert.ok(texts.length >= 5000, `only ${texts.length} texts (are gettext catalogs installed?)`);
    const file = tokenizers[name];
    const [py] = await runPython([{ op: "tokenize", tokenizer: file, texts }]);
    const tokenizer = load(file, py.vocab_size);
    let unk = 0;
    texts.forEach((text, i) => {
      assert.deepEqual(tokenizer.encode(text), py.ids[i], `ids of ${JSON.stringify(text)}`);
      assert.equal(tokenizer.decode(py.ids[i]), py.decoded[i], `decode of the ids of ${JSON.stringify(text)}`);
      if (py.ids[i].includes(tokenizer.tokenToId("<unk>"))) unk++;
    });

    // the same tokenizer with the library's own Precompiled normalizer (NFKC) gives other ids on some texts
    const library = load(file, py.vocab_size);
    const walk = (n) => [n, ...(n?.normalizers ?? []).flatMap(walk)];
    const precompiled = walk(library.tokenizer.normalizer).filter((n) => n instanceof PrecompiledNormalizer);
    assert.equal(precompiled.length, 1);
    delete precompiled[0].normalize; // the prototype's: the library's approximation
    const differ = texts.filter((text, i) => JSON.stringify(library.encode(text)) !== JSON.stringify(py.ids[i]));
    assert.ok(differ.length > 0, "the library's own Precompiled gave Python's ids on every text: this test shows nothing");
    t.diagnostic(`${name}: ${texts.length} texts, equal ids and decoded text (${unk} with <unk>); with the library's ` +
      `Precompiled ${differ.length} texts get other ids, e.g. ${JSON.stringify(differ.slice(0, 3))}`);
  });
}

test("the other Metaspace, Strip and added-token settings: Python's ids and decoded text", async () => {
  // the converted file with: no split, Strip on both sides, a non-special added token, components in Sequences,
  // a decoder that keeps the first token's replacement characters
  const json = JSON.parse(readFileSync(tokenizers["spm-converter"], "utf8"));
  json.normalizer.normalizers[1] = { type: "Strip", strip_left: true, strip_right: true };
  json.pre_tokenizer = { type: "Sequence", pretokenizers: [{ type: "Metaspace", replacement: "▁", prepend_scheme: "always", split: false }] };
  json.decoder = { type: "Sequence", decoders: [{ type: "Metaspace", replacement: "▁", prepend_scheme: "never", split: true }] };
  const size = json.model.vocab.length + json.added_tokens.filter((t) => t.id >= json.model.vocab.length).length;
  json.added_tokens.push({ id: size, content: "@@", single_word: false, lstrip: false, rstrip: false, normalized: false, special: false });
  const file = path.join(dir, "variant.json");
  writeFileSync(file, JSON.stringify(json));
  const some = [...texts.filter((_, i) => i % 3 === 0), "x @@ y", "@@ y", "@@y", "a@@", " @@ ", "\u200f@@"];
  const [py] = await runPython([{ op: "tokenize", tokenizer: file, texts: some }]);
  const tokenizer = load(file, py.vocab_size);
  some.forEach((text, i) => {
    assert.deepEqual(tokenizer.encode(text), py.ids[i], `ids of ${JSON.stringify(text)}`);
    assert.equal(tokenizer.decode(py.ids[i]), py.decoded[i], `decode of the ids of ${JSON.stringify(text)}`);
  });
  // Metaspace's prepend_scheme "first" prepends by NormalizedString offsets, which JS does not track: refused
  json.pre_tokenizer.pretokenizers[0].prepend_scheme = "first";
  assert.throws(() => fromText(JSON.stringify(json), file, py.vocab_size),
    (e) => e instanceof ModelPackageError && /prepend_scheme "first"/.test(e.message) && !e.message.includes("\n"));
});

test("a SentencePiece tokenizer.json: JS refuses what Rust tokenizers refuses, and reads what it reads", async () => {
  const good = JSON.parse(readFileSync(tokenizers["spm-converter"], "utf8"));
  const variant = (change) => {
    const json = structuredClone(good);
    change(json);
    return JSON.stringify(json);
  };
  const precompiled = (json) => json.normalizer.normalizers[0];
  const charsmap = precompiled(good).precompiled_charsmap;
  const cases = {
    "the file itself": JSON.stringify(good),
    "charsmap not base64": variant((j) => { precompiled(j).precompiled_charsmap = "not base64!"; }),
    "charsmap with stray bits": variant((j) => { precompiled(j).precompiled_charsmap = "AB=="; }),
    "charsmap cut in its trie": variant((j) => { precompiled(j).precompiled_charsmap = charsmap.slice(0, 40); }),
    "charsmap a number": variant((j) => { precompiled(j).precompiled_charsmap = 3; }),
    "charsmap missing": variant((j) => { delete precompiled(j).precompiled_charsmap; }),
    "unk_id past the vocabulary": variant((j) => { j.model.unk_id = j.model.vocab.length; }),
    "unk_id null": variant((j) => { j.model.unk_id = null; }),
    "unk_id 0.0": JSON.stringify(good).replace('"unk_id":0', '"unk_id":0.0'),
    "a piece of three fields": variant((j) => { j.model.vocab[5].push(1); }),
    "a piece without score": variant((j) => { j.model.vocab[5] = [j.model.vocab[5][0]]; }),
    "a score as text": variant((j) => { j.model.vocab[5][1] = "-3"; }),
    "byte_fallback null": variant((j) => { j.model.byte_fallback = null; }),
    "no vocab": variant((j) => { delete j.model.vocab; }),
    "Metaspace add_prefix_space false, prepend always": variant((j) => { j.pre_tokenizer.add_prefix_space = false; }),
    "Metaspace add_prefix_space false, prepend never": variant((j) => {
      Object.assign(j.pre_tokenizer, { add_prefix_space: false, prepend_scheme: "never" });
    }),
    "Metaspace str_rep": variant((j) => { j.decoder.str_rep = "_"; }),
  };
  const { errors } = await spmPython({ op: "check", files: Object.values(cases) });
  Object.keys(cases).forEach((name, i) => {
    let js = null;
    try {
      fromText(cases[name], "tokenizer.json", JSON.parse(cases[name]).model.vocab?.length + 4);
    } catch (e) {
      assert.ok(e instanceof ModelPackageError && !e.message.includes("\n"), `${name}: ${e}`);
      js = e.message;
    }
    assert.equal(js === null, errors[i] === null, `${name}: JS says ${js}, Python says ${errors[i]}`);
  });
});

/** A Unigram tokenizer.json of the given [piece, score lexeme] pairs ("<unk>" first, its unk_id), nothing around it. */
function unigramFile(name, pieces, unkId = 0) {
  const vocab = pieces.map(([piece, lexeme]) => `[${JSON.stringify(piece)}, ${lexeme}]`).join(", ");
  const file = path.join(dir, `${name}.json`);
  writeFileSync(file, `{"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null, ` +
    `"post_processor": null, "decoder": null, "model": {"type": "Unigram", "unk_id": ${unkId}, "vocab": [${vocab}]}}`);
  return [file, pieces.length];
}

test("a tie in the Unigram Viterbi: Rust's segmentation, from the scores as Rust reads them", async () => {
  // "x" + "y" scores exactly "xy" by the correctly rounded values (JSON.parse's): the first offer into the end of
  // "xy" ("xy" itself, from the start) would keep it. serde_json reads the lexemes of x and y an ulp off, so that
  // for Rust x + y beats xy: Rust says x y.
  const [x, y, xy] = ["-1.0834139585494995", "-9.905228614807129", "-10.988642573356628"];
  assert.equal(Number(x) + Number(y), Number(xy), "no tie by the correctly rounded scores: this test shows nothing");
  assert.ok(serdeNumber(x) + serdeNumber(y) > serdeNumber(xy));
  const [tie, tieSize] = unigramFile("tie", [["<unk>", "0.0"], ["x", x], ["y", y], ["xy", xy]]);
  // no unk_id: an unknown character is an error only where its offer wins (Rust's MissingUnkId), here never
  const [noUnk, noUnkSize] = unigramFile("no-unk", [["ab", "-1.0"], ["a", "-1.0"], ["c", "-2.0"]], null);
  const some = ["xy", "xyxy", "yxy", "xxyy", "q"];
  const [py, pyNoUnk] = await runPython([{ op: "tokenize", tokenizer: tie, texts: some },
    { op: "tokenize", tokenizer: noUnk, texts: ["ab", "cab", "abab"] }]);
  assert.deepEqual(py.ids[0], [1, 2]);
  const tokenizer = load(tie, tieSize);
  some.forEach((text, i) => assert.deepEqual(tokenizer.encode(text), py.ids[i], `ids of ${JSON.stringify(text)}`));
  const withoutUnk = load(noUnk, noUnkSize);
  ["ab", "cab", "abab"].forEach((text, i) => assert.deepEqual(withoutUnk.encode(text), pyNoUnk.ids[i], text));
  assert.throws(() => withoutUnk.encode("b"), (e) => e instanceof ModelPackageError && /no unk_id/.test(e.message));
});

test("Unigram scores: each number lexeme read to the f64 Rust tokenizers reads", async () => {
  const random = new Random([49]);
  const digits = (n) => Array.from({ length: n }, () => Math.floor(random.random() * 10)).join("");
  const lexemes = ["-7.2364583015441895", "-0.0", "0", "-0", "1", "18446744073709551615", "18446744073709551616",
    "184467440737095516159.5", "18446744073709551619.5", "1844674407370955161.5e1", "0.18446744073709551616",
    "-1.0000000000000000000000001", "1e308", "1.7976931348623157e308", "1.7976931348623158e308", "1e309", "-1e400",
    "1e-400", "4.9e-324", "2.2250738585072011e-308", "1e-330", "123456789e-330", "1e99999999999", "0e99999999999",
    "1e-99999999999", "-5E+2", "1.5e+0", "2147483647e-2147483647", "1e2147483647", "1e-2147483648"];
  for (let i = 0; i < 3000; i++) lexemes.push(String(Math.fround(-20 * random.random()))); // SentencePiece's f32 scores
  for (let i = 0; i < 3000; i++) {
    const whole = digits(1 + Math.floor(random.random() * 22)).replace(/^0+(?=.)/, "");
    const e = Math.floor(random.random() * 660) - 330;
    lexemes.push(`${random.random() < 0.5 ? "-" : ""}${whole}.${digits(1 + Math.floor(random.random() * 22))}` +
      `${random.random() < 0.5 ? `e${e}` : ""}`);
  }
  const { scores } = await spmPython({ op: "scores", lexemes });
  let differ = 0;
  lexemes.forEach((lexeme, i) => {
    const want = scores[i] ?? (lexeme.startsWith("-") ? -Infinity : Infinity); // refused: out of range
    assert.ok(Object.is(serdeNumber(lexeme), want), `${lexeme}: JS reads ${serdeNumber(lexeme)}, Rust ${scores[i]}`);
    if (!Object.is(Number(lexeme), want)) differ++;
  });
  assert.ok(differ > 100, `JSON.parse read only ${differ} lexemes otherwise than Rust: this test shows little`);
});
