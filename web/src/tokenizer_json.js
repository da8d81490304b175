// The checks a package's tokenizer.json passes before @huggingface/tokenizers reads it: what the Python runtime's
// reader refuses (runtime/package/manifest.py _read_tokenizer: Rust tokenizers' strict serde reader, then the regular
// expressions of runtime/package/tokenizer.py), this file refuses too, so that both runtimes load the same files
// (test/hostile_tokenizer.test.js feeds both the same hostile files). @huggingface/tokenizers reads leniently: a
// byte-order mark, an unknown field, an id written 3.0, a merge of pieces that are not in the vocabulary, padding
// that is no padding, a lone surrogate... all pass there. Every refusal is one line naming the field.
import { isInteger, JsonDepthError, JsonFloat, parseJson, serdeNumber, short } from "./json.js";
import { parsePrecompiledCharsmap } from "./precompiled.js";

// group_digits (training/tokenizer.py): the empty place inside a digit run with a multiple of 3 digits to its right
export const THOUSANDS = String.raw`(?<=\d)(?=(?:\d{3})+(?!\d))`;
// The only regular expressions a tokenizer.json may hold ({"Regex": ...} patterns): the trainer's, as
// runtime/package/tokenizer.py ALLOWED_REGEXES (the same list; a test compares them). Any other could backtrack
// for minutes on a short text: JavaScript's RegExp has no backtracking limit, and Oniguruma's stops one match only.
// Converted SentencePiece tokenizers (export/hf_tokenizers.py; transformers' NLLB tokenizer has the first too): a
// run of spaces (-> one space: remove_extra_whitespaces), and the spaces at either end of a text (-> none: the same
// on the normalized text, and the slow tokenizers' strip() of the decoded text). Both linear: the lookbehind tries
// each run of spaces from its start only.
export const COLLAPSE_SPACES = " {2,}";
export const EDGE_SPACES = "^ +|(?<! ) +$";
export const ALLOWED_REGEXES = [THOUSANDS, COLLAPSE_SPACES, EDGE_SPACES];
export const REGEX_COMPONENTS = ["normalizer", "pre_tokenizer", "decoder"]; // the parts of a tokenizer.json with patterns
export const SERDE_DEPTH = 128; // serde_json's recursion limit: Rust refuses a file nested deeper
const TOP_LEVEL = ["version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer", "model",
  "post_processor", "decoder"];
const U32 = 2 ** 32 - 1;
const BEHAVIORS = ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"];
const PREPEND = ["first", "never", "always"];

/** The first {"Regex": pattern} of a parsed tokenizer.json that ALLOWED_REGEXES lacks: [component, pattern], or null
 * (runtime/package/tokenizer.py foreign_regex). */
export function foreignRegex(json) {
  const walk = (node) => {
    if (node === null || typeof node !== "object") return undefined;
    if (!Array.isArray(node) && Object.hasOwn(node, "Regex") && !ALLOWED_REGEXES.includes(node.Regex)) return node.Regex;
    for (const child of Array.isArray(node) ? node : Object.values(node)) {
      const found = walk(child);
      if (found !== undefined) return found;
    }
    return undefined;
  };
  for (const component of REGEX_COMPONENTS) {
    const found = walk(json?.[component]);
    if (found !== undefined) return [component, found];
  }
  return null;
}

// --- field kinds, as Rust's serde reads them ------------------------------------------------------------------
const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof JsonFloat);
const KINDS = {
  bool: (v) => typeof v === "boolean",
  string: (v) => typeof v === "string",
  char: (v) => typeof v === "string" && [...v].length === 1,
  u32: (v) => isInteger(v) && v >= 0 && v <= U32, // 3.0 is a JsonFloat: no integer, as for serde
  usize: (v) => isInteger(v) && v >= 0 && v <= Number.MAX_SAFE_INTEGER,
  number: (v) => typeof v === "number" || v instanceof JsonFloat,
  pattern: (v) => isObject(v) && Object.keys(v).length === 1 && (typeof v.String === "string" || typeof v.Regex === "string"),
  behavior: (v) => BEHAVIORS.includes(v),
  prepend: (v) => PREPEND.includes(v),
  list: (v) => Array.isArray(v),
  charsmap: (v) => typeof v === "string", // what it holds: checkComponent
};
const nullable = (kind) => (v) => v === null || KINDS[kind](v);
// type -> {field: [kind, required]}: the fields Rust tokenizers requires (probed on its reader) and the kinds it
// accepts; fields it does not know are ignored, as Rust does. A type missing here is one the JS library lacks.
// (Precompiled, which the library only approximates with NFKC, runs as Rust runs it: tokenizer.js, precompiled.js.)
const R = true, O = false;
// Metaspace (pre-tokenizer and decoder): the legacy add_prefix_space false means prepend_scheme "never", which the
// file must then say (Rust refuses the mismatch: checkComponent); str_rep is read and ignored
const METASPACE = { replacement: ["char", R], prepend_scheme: ["prepend", O], split: ["bool", O],
  add_prefix_space: [nullable("bool"), O], str_rep: [nullable("string"), O] };
const COMPONENTS = {
  normalizer: {
    NFC: {}, NFD: {}, NFKC: {}, NFKD: {}, Lowercase: {}, StripAccents: {}, Nmt: {}, ByteLevel: {},
    Strip: { strip_left: ["bool", R], strip_right: ["bool", R] },
    Replace: { pattern: ["pattern", R], content: ["string", R] },
    Prepend: { prepend: ["string", R] },
    BertNormalizer: { clean_text: ["bool", R], handle_chinese_chars: ["bool", R], strip_accents: [nullable("bool"), O],
      lowercase: ["bool", R] },
    Precompiled: { precompiled_charsmap: ["charsmap", R] },
    Sequence: { normalizers: ["list", R] },
  },
  pre_tokenizer: {
    Whitespace: {}, WhitespaceSplit: {}, BertPreTokenizer: {},
    Metaspace: METASPACE,
    Punctuation: { behavior: ["behavior", O] },
    Digits: { individual_digits: ["bool", R] },
    Split: { pattern: ["pattern", R], behavior: ["behavior", R], invert: ["bool", R] },
    ByteLevel: { add_prefix_space: ["bool", R], trim_offsets: ["bool", R], use_regex: ["bool", O] },
    Sequence: { pretokenizers: ["list", R] },
  },
  decoder: {
    Fuse: {}, ByteFallback: {},
    Metaspace: METASPACE,
    ByteLevel: { add_prefix_space: ["bool", R], trim_offsets: ["bool", R], use_regex: ["bool", O] },
    WordPiece: { prefix: ["string", R], cleanup: ["bool", R] },
    BPEDecoder: { suffix: ["string", R] },
    CTC: { pad_token: ["string", R], word_delimiter_token: ["string", R], cleanup: ["bool", R] },
    Strip: { content: ["char", R], start: ["usize", R], stop: ["usize", R] },
    Replace: { pattern: ["pattern", R], content: ["string", R] },
    Sequence: { decoders: ["list", R] },
  },
};
const SEQUENCE_FIELD = { normalizer: "normalizers", pre_tokenizer: "pretokenizers", decoder: "decoders" };
const ADDED_TOKEN = { id: ["u32", R], content: ["string", R], single_word: ["bool", R], lstrip: ["bool", R],
  rstrip: ["bool", R], normalized: ["bool", R], special: ["bool", R] };
const PADDING = { strategy: [(v) => v === "BatchLongest" || (isObject(v) && KINDS.usize(v.Fixed)), R],
  direction: [(v) => v === "Left" || v === "Right", R], pad_to_multiple_of: [nullable("usize"), O],
  pad_id: ["u32", R], pad_type_id: ["u32", R], pad_token: ["string", R] };
const TRUNCATION = { direction: [(v) => v === "Left" || v === "Right", O], max_length: ["usize", R],
  strategy: [(v) => ["LongestFirst", "OnlyFirst", "OnlySecond"].includes(v), R], stride: ["usize", R] };
const BPE = { dropout: [(v) => v === null || (KINDS.number(v) && v >= 0 && v <= 1), O],
  unk_token: [nullable("string"), O], continuing_subword_prefix: [nullable("string"), O],
  end_of_word_suffix: [nullable("string"), O], fuse_unk: ["bool", O], byte_fallback: ["bool", O], ignore_merges: ["bool", O] };

const UNIGRAM = { vocab: ["list", R], unk_id: [nullable("usize"), O], byte_fallback: ["bool", O] };

/** Problems are thrown as Error(text naming the field); readTokenizerJson makes them one ModelPackageError line. */
function checkFields(obj, spec, name) {
  if (!isObject(obj)) throw new Error(`${name} should be an object, got ${short(obj)}`);
  for (const [key, [kind, required]] of Object.entries(spec)) {
    if (!Object.hasOwn(obj, key)) {
      if (required) throw new Error(`${name} has no field ${key}`);
      continue;
    }
    const ok = typeof kind === "function" ? kind(obj[key]) : KINDS[kind](obj[key]);
    if (!ok) throw new Error(`${name}.${key} is ${short(obj[key])}, which tokenizers does not read`);
  }
}

function checkComponent(part, value, name) {
  if (value === null) return;
  if (!isObject(value) || typeof value.type !== "string" || !Object.hasOwn(COMPONENTS[part], value.type)) {
    throw new Error(`${name} is ${short(isObject(value) ? value.type ?? value : value)}, not a ${part} type both runtimes read`);
  }
  checkFields(value, COMPONENTS[part][value.type], `${name} (${value.type})`);
  if (value.type === "Precompiled") {
    try {
      parsePrecompiledCharsmap(value.precompiled_charsmap);
    } catch (e) {
      throw new Error(`${name} (Precompiled): ${e.message}`);
    }
  }
  if (part === "pre_tokenizer" && value.type === "Metaspace" && value.prepend_scheme === "first") {
    // Rust prepends then only where the normalized text starts at the original's offset 0 (NormalizedString's
    // offsets through every normalizer): JS tracks no offsets, and would give other ids where a normalizer removes
    // the text's first characters (a leading U+200F, a stripped space). The OPUS-MT and NLLB conversions write "always".
    throw new Error(`${name} (Metaspace) has prepend_scheme "first", which the JS runtime cannot run as Rust does`);
  }
  if (value.type === "Metaspace" && value.add_prefix_space === false && value.prepend_scheme !== "never") {
    throw new Error(`${name} (Metaspace) has add_prefix_space false but prepend_scheme ${short(value.prepend_scheme ?? "always")}`);
  }
  if (value.type === "Sequence") {
    value[SEQUENCE_FIELD[part]].forEach((inner, i) => checkComponent(part, inner, `${name}.${SEQUENCE_FIELD[part]}[${i}]`));
  }
}

function checkVocab(vocab, name) {
  if (!isObject(vocab)) throw new Error(`${name} should be an object of token -> id, got ${short(vocab)}`);
  for (const [token, id] of Object.entries(vocab)) {
    if (!KINDS.u32(id)) throw new Error(`${name}[${short(token)}] is ${short(id)}, not an id (an integer in [0, ${U32}])`);
  }
}

/** A Unigram model as Rust reads it (models/unigram/serialization.rs, Unigram::from): vocab a list of [piece, score]
 * pairs, unk_id null or an index into it, byte_fallback a bool. */
function checkUnigram(model) {
  checkFields(model, UNIGRAM, "model");
  model.vocab.forEach((entry, i) => {
    if (!Array.isArray(entry) || entry.length !== 2 || typeof entry[0] !== "string" || !KINDS.number(entry[1])) {
      throw new Error(`model.vocab[${i}] is ${short(entry)}, not a [piece, score] pair`);
    }
  });
  if (model.unk_id != null && model.unk_id >= model.vocab.length) {
    throw new Error(`model.unk_id is ${model.unk_id}, outside its vocabulary of ${model.vocab.length} pieces`);
  }
}

function checkModel(model) {
  if (!isObject(model)) throw new Error(`model should be an object, got ${short(model)}`);
  const type = model.type ?? "BPE";
  if (type !== "BPE") {
    if (!["WordLevel", "WordPiece", "Unigram"].includes(type)) throw new Error(`model.type is ${short(type)}, not a model type`);
    if (type === "Unigram") checkUnigram(model);
    else checkVocab(model.vocab, "model.vocab");
    return;
  }
  if (!Object.hasOwn(model, "vocab") || !Object.hasOwn(model, "merges")) throw new Error("the BPE model has no vocab or no merges");
  checkVocab(model.vocab, "model.vocab");
  checkFields(model, BPE, "model");
  if (!Array.isArray(model.merges)) throw new Error(`model.merges should be a list, got ${short(model.merges)}`);
  model.merges.forEach((merge, i) => {
    const pair = typeof merge === "string" ? merge.split(" ") : merge;
    if (!Array.isArray(pair) || pair.length !== 2 || !pair.every((p) => typeof p === "string")) {
      throw new Error(`model.merges[${i}] is ${short(merge)}, not a pair of pieces`);
    }
    const missing = pair.find((p) => !Object.hasOwn(model.vocab, p));
    if (missing !== undefined) throw new Error(`model.merges[${i}] merges ${short(missing)}, which is not in the vocabulary`);
  });
}

/** Every string of a parsed file (keys too) is well-formed UTF-16: a lone surrogate (from a \ud800 escape) is refused,
 * as serde_json refuses it; numbers are finite (1e400 is out of range there; NaN and Infinity are no JSON). */
function checkValues(node, where = "the file") {
  if (typeof node === "string") {
    if (/\p{Cs}/u.test(node)) throw new Error(`a string of ${where} holds a lone UTF-16 surrogate (a \\uD800-\\uDFFF escape)`);
  } else if (typeof node === "number" || node instanceof JsonFloat) {
    if (!Number.isFinite(Number(node))) throw new Error(`${where} holds the number ${short(node)}, out of range`);
  } else if (Array.isArray(node)) {
    for (const child of node) checkValues(child, where);
  } else if (node !== null && typeof node === "object") {
    for (const [key, child] of Object.entries(node)) {
      checkValues(key, where);
      checkValues(child, where);
    }
  }
}

/** The parsed file with each JsonFloat replaced by its number, in place. */
function plainNumbers(node) {
  if (node instanceof JsonFloat) return node.valueOf();
  if (node !== null && typeof node === "object") for (const [key, child] of Object.entries(node)) node[key] = plainNumbers(child);
  return node;
}

/** The tokenizer.json text -> the parsed file for @huggingface/tokenizers (plain numbers), or an Error whose message
 * says, in one line, why Rust tokenizers (and so the Python runtime) would not read it. The caller names the file. */
export function parseTokenizerJson(text) {
  let json;
  try {
    // keeps 3.0 apart from 3, reads each number to the f64 Rust reads; a byte-order mark is no JSON, as for serde
    json = parseJson(text, SERDE_DEPTH, serdeNumber);
  } catch (e) {
    if (e instanceof JsonDepthError) throw new Error(`it nests lists and objects more than ${SERDE_DEPTH} levels deep`);
    throw e;
  }
  checkValues(json);
  if (!isObject(json)) throw new Error("no tokenizer model in it");
  const unknown = Object.keys(json).filter((k) => !TOP_LEVEL.includes(k));
  if (unknown.length) throw new Error(`unknown field ${short(unknown[0])}`);
  if (Object.hasOwn(json, "version") && json.version !== "1.0") throw new Error(`version ${short(json.version)} is unknown (tokenizers writes '1.0')`);
  if (!Object.hasOwn(json, "model")) throw new Error("no tokenizer model in it");
  checkModel(json.model);
  if (Object.hasOwn(json, "added_tokens")) {
    if (!Array.isArray(json.added_tokens)) throw new Error(`added_tokens should be a list, got ${short(json.added_tokens)}`);
    json.added_tokens.forEach((token, i) => checkFields(token, ADDED_TOKEN, `added_tokens[${i}]`));
  }
  for (const [key, spec] of [["padding", PADDING], ["truncation", TRUNCATION]]) {
    if (json[key] != null) checkFields(json[key], spec, key);
  }
  for (const part of REGEX_COMPONENTS) if (json[part] != null) checkComponent(part, json[part], part);
  // the library gets plain numbers (a JsonFloat is a Number object; JSON.parse would round some of them otherwise than
  // Rust) and null for the parts the file leaves out
  const plain = plainNumbers(json);
  for (const part of [...REGEX_COMPONENTS, "post_processor"]) plain[part] ??= null;
  plain.added_tokens ??= [];
  return plain;
}
