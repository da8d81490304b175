// The JS tokenizer (src/tokenizer.js on @huggingface/tokenizers) against Python's `tokenizers`, as the runtime
// uses it: the same ids for thousands of texts (real text from the system's gettext catalogs: English msgids and
// their translations into many scripts; numbers in words and digits; odd Unicode; empty and blank strings), and
// the same text back from decode. Three tokenizers: the shipped model's, and two that the project's own trainer
// (seq2onnx.training.tokenizer.train_tokenizer) makes in this run, one plain and one with every option.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { PackageTokenizer } from "../src/tokenizer.js";
import { MODEL_DIR, numberTexts, ODD_LINES, runPython } from "./python.js";

const LANGS = ["de", "fr", "es", "ru", "el", "tr", "ja", "zh_CN", "ar", "hi", "pl", "uk", "ko", "he", "vi", "th"];
const ODD = [...ODD_LINES, "ΟΔΟΣ ΟΔΟΣ. ὈΔΥΣΣΕΎΣ Σ", "İstanbul I ı", "Straße ẞ", "ﬁnance ﬀ", "１２３ ４５６７",
  "٣٤٥ ١٢", "½ ² Ⅻ ⑦ ₃", "ǅ ǈ", "Ω Ω", "ﷺ", "︵", "ＡＢＣ", "한국어", "\u0085x\u2028y\u2029", "▁ ▁▁x", "a—b–c",
  "‘quote’ “x”", "¿qué? ¡sí!", "1,234,567.89", "3-4", "1000000", "00042", "e\u0301\u0301", "\u202etxet", "x\ty",
  "  leading and trailing  ", "multiple   spaces", "[file ..]  edit", "echo [-neE] [arg ...]"];
const dir = mkdtempSync(path.join(tmpdir(), "seq2onnx-web-tokenizer-"));
const TOKENIZERS = { shipped: path.join(MODEL_DIR, "tokenizer.json"), trained: path.join(dir, "plain.json"),
  "trained, every option": path.join(dir, "all.json") };
let texts;

before(async () => {
  const [{ texts: corpus }] = await runPython([{ op: "corpus", langs: LANGS, per_lang: 300 }]);
  const numbers = Array.from({ length: 1000 }, (_, i) => i);
  const more = Array.from({ length: 300 }, (_, i) => [String(i * 7919 + 13 * i * i), `${i}.${i % 7}`, `-${i * 101}`]).flat();
  texts = [...corpus, ...(await numberTexts(numbers, ["canonical", "UPPER CASE", "digits, separators"])), ...more, ...ODD];
  await runPython([
    { op: "train_tokenizer", texts: corpus.slice(0, 3000), vocab_size: 600, out: TOKENIZERS.trained },
    { op: "train_tokenizer", texts: corpus.slice(0, 3000), vocab_size: 800, out: TOKENIZERS["trained, every option"],
      lowercase: true, split_digits: true, split_punctuation: true, group_digits: true },
  ]);
});
after(() => rmSync(dir, { recursive: true, force: true }));

for (const [name, file] of Object.entries(TOKENIZERS)) {
  test(`${name} tokenizer: Python's ids and decoded text`, async (t) => {
    assert.ok(texts.length >= 5000, `only ${texts.length} texts (are gettext catalogs installed?)`);
    const [py] = await runPython([{ op: "tokenize", tokenizer: file, texts }]);
    const tokenizer = new PackageTokenizer(readFileSync(file, "utf8"), file, { vocab_size: py.vocab_size }, { reexport: "" });
    let unk = 0;
    texts.forEach((text, i) => {
      const ids = tokenizer.encode(text);
      assert.deepEqual(ids, py.ids[i], `ids of ${JSON.stringify(text)}`);
      assert.equal(tokenizer.decode(py.ids[i]), py.decoded[i], `decode of the ids of ${JSON.stringify(text)}`);
      if (ids.includes(tokenizer.tokenToId("<unk>"))) unk++;
    });
    t.diagnostic(`${name}: ${texts.length} texts, equal ids and decoded text (${unk} with <unk>)`);
  });
}

test("a literal </s>, <pad> or <s> in a text is ordinary pieces, never the special id", () => {
  const file = TOKENIZERS.shipped;
  const tokenizer = new PackageTokenizer(readFileSync(file, "utf8"), file, { vocab_size: 200 }, { reexport: "" });
  for (const special of ["</s>", "<pad>", "<s>"]) {
    const ids = tokenizer.encode(`one ${special} two`);
    assert.ok(ids.length > 2 && !ids.includes(tokenizer.tokenToId(special)), `${special}: ${ids}`);
  }
});
