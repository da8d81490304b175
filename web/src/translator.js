// Translator: text in, text out (runtime/translator.py), on a platform (index.js: Node; browser.js: the browser).
//
//   const t = await Translator.load("models/numbers-en-de", { computeType: "int8" });
//   await t.translate("three hundred and one");                                       // -> string
//   await t.translateBatch(texts, { beamSize: 4, numHypotheses: 2, returnScores: true }); // -> [{hypotheses, scores, ...}]
//   await t.translateBatch(texts, { sourceLang: "eng_Latn", targetLang: "deu_Latn" });  // a multilingual model
//   for await (const piece of t.generateTokens(text, { beamSize: 4 })) ...             // streaming
//
// Text to ids and back as the Python runtime does (docs/CONTRACTS.md "Runtime input"):
//   * a text with nothing but whitespace ("" included) is not translated: one empty hypothesis, score 0;
//   * a lone surrogate becomes U+FFFD, with a warning naming the input;
//   * source ids = the language tokens (sourceLang / targetLang of a multilingual model), the source tokenizer's ids
//     and EOS; a text over maxInputLength tokens is cut to it (the language tokens and EOS kept), with a warning;
//     only a prefix of a long text is tokenized (tokenIds), so its length costs no memory or time;
//   * hypotheses are decoded by the target tokenizer without EOS, special tokens skipped;
//   * with no decoding options, a converted model decodes as its transformers generate() does: the package's
//     generation defaults come first, then a target language's forced first token, then the call's options.
import { decode, decodeSteps, commonPrefix } from "./decoding.js";
import { SPINNING, checkOnnxruntime, openEngine, runsFewRows } from "./engine.js";
import { ModelPackageError, Seq2OnnxError } from "./errors.js";
import { readPackage, UNCHECKED } from "./manifest.js";
import { checkInt, decodingOptions, DECODING_DEFAULTS, DEFAULT_MAX_BATCH_SIZE, MAX_CHARS_PER_TOKEN } from "./options.js";

// computeType -> package variant ("default": fp32; float16 is a CUDA variant, which JS does not run)
export const COMPUTE_TYPES = { default: "fp32", float32: "fp32", int8: "int8" };
export const BATCH_TYPES = ["examples", "tokens"];
const TEXT_DEFAULTS = { maxBatchSize: DEFAULT_MAX_BATCH_SIZE, batchType: "examples", maxInputLength: null,
  returnScores: false, targetPrefix: null, sourceLang: null, targetLang: null };
const ENCODE_CHUNK = 1024; // texts tokenized at once
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, "g");
// Python's str.isspace(): the characters of bidirectional class WS, B or S, or category Zs
const SPACE = "\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
const BLANK = new RegExp(`^[${SPACE}]*$`);

/** Nothing to translate: empty or whitespace only (Python's str.isspace), the empty hypothesis. */
export function isBlank(text) {
  return BLANK.test(text);
}

/** Indices sorted by length (ascending, stable), cut into batches of at most maxBatchSize examples, or of at most
 * maxBatchSize padded source tokens (batchType "tokens"); 0 = one batch (runtime/translator.py split_batches). */
export function splitBatches(lengths, maxBatchSize, batchType) {
  const order = lengths.map((_, i) => i).sort((a, b) => lengths[a] - lengths[b] || a - b);
  if (maxBatchSize === 0) return order.length ? [order] : [];
  const batches = [];
  let current = [];
  for (const i of order) {
    const size = batchType === "examples" ? current.length + 1 : (current.length + 1) * lengths[i];
    if (current.length && size > maxBatchSize) {
      batches.push(current);
      current = [];
    }
    current.push(i);
  }
  if (current.length) batches.push(current);
  return batches;
}

/** The first `n` code points of `text` (Python slices strings by code points) and whether text has more. */
function codePointPrefix(text, n) {
  if (text.length <= n) return [text, false]; // fewer code units than n: fewer code points too
  let units = 0;
  for (let count = 0; count < n && units < text.length; count++) units += text.codePointAt(units) > 0xffff ? 2 : 1;
  return [text.slice(0, units), units < text.length];
}

/** [ids, cut] per text: the ids of a prefix of it that holds its first `limit` tokens, and whether the prefix is
 * shorter than the text. The prefix starts at `limit` characters and doubles until it yields 2 x limit tokens
 * (the pieces its cut splits lie past the first `limit`), or holds the whole text, or limit x 64 characters. */
export function tokenIds(tokenizer, texts, limit) {
  const ids = texts.map(() => []), cut = texts.map(() => false);
  let todo = texts.map((_, i) => i), size = limit;
  while (todo.length) {
    const longer = [];
    for (const i of todo) {
      const [prefix, more] = codePointPrefix(texts[i], size);
      const encoded = tokenizer.encode(prefix);
      if (more && encoded.length < 2 * limit && size < limit * MAX_CHARS_PER_TOKEN) longer.push(i);
      else [ids[i], cut[i]] = [encoded, more];
    }
    [todo, size] = [longer, 2 * size];
  }
  return [ids, cut];
}

const LOAD_DEFAULTS = { computeType: "default", verify: true, onWarning: (m) => console.warn(`warning: ${m}`),
  intraThreads: 0, interThreads: 1 };

/** options -> [the `known` ones with their defaults, the decoding options]; an unknown name is a RangeError. */
function splitOptions(options, known, decodingNames = DECODING_DEFAULTS) {
  if (options === null || typeof options !== "object") throw new TypeError(`options must be an object, got ${options}`);
  const unknown = Object.keys(options).filter((k) => !Object.hasOwn(known, k) && !Object.hasOwn(decodingNames, k)).sort();
  if (unknown.length) {
    const all = [...Object.keys(known), ...Object.keys(decodingNames)].sort();
    throw new RangeError(`unknown option(s) ${unknown.join(", ")}; known: ${all.join(", ")}`);
  }
  const own = { ...known }, decoding = {};
  for (const [k, v] of Object.entries(options)) {
    if (v === undefined) continue;
    if (Object.hasOwn(known, k)) own[k] = v;
    else decoding[k] = v;
  }
  return [own, decoding];
}

function checkIds(name, seqs, vocab) {
  seqs.forEach((s, i) => {
    const bad = s.find((id) => !Number.isInteger(id) || id < 0 || id >= vocab);
    if (bad !== undefined) throw new RangeError(`${name}[${i}] holds an id outside the vocabulary [0, ${vocab}): ${bad}`);
  });
}

export class Translator {
  /** Load a model package on a platform (platform_node.js or platform_browser.js); the entry points (index.js,
   * browser.js) give Translator.load(dirOrUrl, options) with theirs.
   * computeType: "default" | "float32" | "int8": the package variant, as Python's compute_type.
   * verify: check the SHA-256 of the files loaded against the manifest. onWarning: called with each warning's
   * text (default console.warn). intraThreads / interThreads: onnxruntime's threads (Node; 0: its default). */
  static async open(platform, source, options = {}) {
    const [{ computeType, verify, onWarning, intraThreads, interThreads }] = splitOptions(options, LOAD_DEFAULTS, {});
    if (!Object.hasOwn(COMPUTE_TYPES, computeType)) {
      const extra = computeType === "float16" ? " (float16 runs on CUDA only, in the Python runtime)" : "";
      throw new RangeError(`computeType must be one of ${Object.keys(COMPUTE_TYPES).join(", ")}, got ${JSON.stringify(computeType)}${extra}`);
    }
    const maxThreads = 4 * platform.cpuCount();
    checkInt("intraThreads", intraThreads, 0, maxThreads);
    checkInt("interThreads", interThreads, 1, maxThreads);
    const pkg = await readPackage(platform, source, { verify });
    const variantName = COMPUTE_TYPES[computeType];
    if (!Object.hasOwn(pkg.variants, variantName)) {
      const available = Object.values(pkg.variants).map((v) => `${v.name} (${v.precision})`).join(", ");
      throw new ModelPackageError(`${pkg.describe()} has no ${computeType} variant; it has ${available} (export with ` +
        "--int8 / --fp16 to add one)");
    }
    const variant = pkg.variants[variantName];
    if (Object.hasOwn(UNCHECKED, variant.status)) {
      onWarning(`${pkg.describe()}: the ${variantName} variant ${UNCHECKED[variant.status]}; its tokens may differ from ` +
        "float32 more than the export's thresholds allow");
    }
    checkOnnxruntime(platform.ort, variant.minOnnxruntime, `${pkg.describe()}: the ${variantName} variant`,
      platform.name === "node" ? "onnxruntime-node" : "onnxruntime-web");
    // each graph read once, checked, and handed to onnxruntime as those bytes right before its session (openEngine);
    // a second decoder step for steps of few rows where this onnxruntime runs it (engine.js runsFewRows)
    let engine;
    try {
      engine = await openEngine(pkg, variantName, (file) => pkg.readGraph(file),
        (graph) => platform.sessionOptions({ intraThreads, interThreads, spinning: SPINNING[graph] }),
        runsFewRows(platform.ort, variant.fewRows));
    } finally {
      pkg.releaseShared();
    }
    return new this(pkg, variantName, engine, onWarning);
  }

  constructor(pkg, variant, engine, onWarning) {
    this.package = pkg;
    this.config = pkg.config;
    this.tokenizer = pkg.tokenizer; // source texts -> ids
    this.detokenizer = pkg.detokenizer; // output ids -> text, and target texts -> ids
    this.variant = variant;
    this.engine = engine; // the decoding engine (engine.js), for id-level use with decoding.js
    this.onWarning = onWarning;
  }

  /** Release the onnxruntime sessions (their native memory and threads); the Translator is unusable after it. */
  async release() {
    await this.engine.release();
  }

  // --- text <-> ids ---------------------------------------------------------------------------------
  checkTexts(texts) {
    if (typeof texts === "string") {
      throw new TypeError("texts must be an array of strings, got one string: wrap it in an array, or call translate()");
    }
    if (!Array.isArray(texts)) throw new TypeError(`texts must be an array of strings, got ${typeof texts}`);
    return texts.map((t, i) => {
      if (typeof t !== "string") throw new TypeError(`texts[${i}] must be a string, got ${t === null ? "null" : typeof t}`);
      if (LONE_SURROGATE.test(t)) {
        this.onWarning(`input ${i} is not valid Unicode (lone surrogates); they were replaced with U+FFFD`);
        t = t.replace(LONE_SURROGATES, "\uFFFD");
      }
      return t;
    });
  }

  /** texts -> [source ids (prefix: language tokens, then the text's, then EOS), truncated], cut to maxInputLength ids
   * (the prefix and EOS kept) with a warning naming the input (its number in `numbers`, default its position). */
  sources(texts, maxInputLength, numbers = null, prefix = []) {
    const maxPositions = this.config.max_positions;
    const limit = maxInputLength ?? maxPositions;
    if (!Number.isInteger(limit) || limit < 1 || limit > maxPositions) {
      throw new RangeError(`maxInputLength must be an integer in [1, ${maxPositions}] (the model's max_positions), got ${maxInputLength}`);
    }
    const sources = [], truncated = [];
    for (let start = 0; start < texts.length; start += ENCODE_CHUNK) {
      const [ids, cut] = tokenIds(this.tokenizer, texts.slice(start, start + ENCODE_CHUNK), limit);
      ids.forEach((text, k) => {
        const x = [...prefix, ...text];
        const j = start + k, i = numbers === null ? j : numbers[j];
        if (x.length + 1 > limit) {
          this.onWarning(`input ${i} has ${cut[k] ? `more than ${limit}` : x.length + 1} tokens (EOS included); truncated ` +
            `to maxInputLength=${limit}`);
        } else if (cut[k]) {
          this.onWarning(`input ${i} is longer than ${limit * MAX_CHARS_PER_TOKEN} characters (maxInputLength=${limit} x ` +
            `${MAX_CHARS_PER_TOKEN}); the rest was not translated`);
        }
        truncated.push(cut[k] || x.length + 1 > limit);
        sources.push([...x.slice(0, limit - 1), this.config.eos_id]);
      });
    }
    return [sources, truncated];
  }

  prefixes(targetPrefix, n) {
    if (targetPrefix === null) return null;
    if (!Array.isArray(targetPrefix) || targetPrefix.length !== n) {
      throw new RangeError(`targetPrefix must be an array of ${n} strings (or null entries), one per input`);
    }
    const limit = this.config.max_positions; // no decoding goes further
    const [ids] = tokenIds(this.detokenizer, this.checkTexts(targetPrefix.map((p) => p ?? "")), limit);
    return ids.map((p) => p.slice(0, limit));
  }

  detokenize(ids) {
    return this.detokenizer.decode(ids);
  }

  /** The target tokenizer's piece of each id ("▁drei", "hundert", "</s>"): labels for attention rows and columns. */
  pieces(ids) {
    return ids.map((id) => this.detokenizer.idToToken(id));
  }

  /** [the ids that start every source (NLLB's source language token, Marian's >>fra<< target tag), the decoding
   * options the target language sets (forcedBosId: M2M100 / NLLB)], from the package's languages
   * (runtime/translator.py _languages). */
  languages(sourceLang, targetLang) {
    const langs = this.package.languages, ids = this.package.languageIds;
    if (langs === null) {
      const given = sourceLang != null ? "sourceLang" : targetLang != null ? "targetLang" : null;
      if (given !== null) {
        throw new RangeError(`${given} cannot be checked: this model's package records no languages (export it with ` +
          "--source-lang and --target-lang)");
      }
      return [[], {}];
    }
    const source = langs.pick("source", sourceLang, "sourceLang");
    const target = langs.pick("target", targetLang, "targetLang");
    const prefix = langs.sourceToken ? [ids[source]] : [];
    if (langs.targetToken === "source_prefix") prefix.push(ids[target]);
    return [prefix, langs.targetToken === "forced_bos" ? { forcedBosId: ids[target] } : {}];
  }

  /** The ids translateBatch decodes for `text`: its pieces, cut to maxInputLength, and EOS (the columns of its
   * attention); no warnings (translateBatch gives them). */
  sourceIds(text, maxInputLength = null) {
    const warn = this.onWarning;
    this.onWarning = () => {};
    try {
      return this.sources(this.checkTexts([text]), maxInputLength)[0][0];
    } finally {
      this.onWarning = warn;
    }
  }

  /** The package's generation defaults (a converted model: what its generate() does), then the call's decoding
   * options, checked (options.js); returnAttention against this package's graphs. */
  decodingOptions(decoding) {
    const opts = decodingOptions({ ...this.package.generation, ...decoding });
    if (opts.returnAttention && !this.engine.hasAttention) throw this.engine.noAttentionError();
    return opts;
  }

  // --- the API --------------------------------------------------------------------------------------
  /** Id-level translation: sources are id lists ending with EOS. -> per source up to numHypotheses Hypothesis
   * (tokens, score, normalizedScore, finished). Options: maxBatchSize, batchType, targetPrefixIds and the
   * decoding options. */
  async translateIds(sources, options = {}) {
    const [own, decoding] = splitOptions(options, { maxBatchSize: DEFAULT_MAX_BATCH_SIZE, batchType: "examples", targetPrefixIds: null });
    const opts = this.decodingOptions(decoding);
    checkInt("maxBatchSize", own.maxBatchSize, 0);
    if (!BATCH_TYPES.includes(own.batchType)) throw new RangeError(`batchType must be one of ${BATCH_TYPES.join(", ")}, got ${own.batchType}`);
    for (const s of sources) {
      if (!(s.length >= 1 && s.length <= this.config.max_positions)) {
        throw new RangeError(`a source must hold 1..${this.config.max_positions} ids, got ${s.length}`);
      }
    }
    checkIds("sources", sources, this.config.source_vocab_size);
    const prefixes = own.targetPrefixIds;
    if (prefixes !== null) {
      if (prefixes.length !== sources.length) {
        throw new RangeError(`targetPrefixIds must hold one id list per source (${sources.length}), got ${prefixes.length}`);
      }
      checkIds("targetPrefixIds", prefixes, this.config.vocab_size);
    }
    const results = sources.map(() => []);
    for (const batch of splitBatches(sources.map((s) => s.length), own.maxBatchSize, own.batchType)) {
      const out = await decode(this.engine, this.config, batch.map((i) => sources[i]), opts,
        prefixes === null ? null : batch.map((i) => prefixes[i]));
      batch.forEach((i, j) => (results[i] = out[j]));
    }
    return results;
  }

  /** Translate texts; results in the caller's order: [{hypotheses, tokenIds, scores, normalizedScores,
   * truncated, finished, attention, sourceUnknownTokens}] (scores and normalizedScores with returnScores, attention
   * with returnAttention, else null; sourceUnknownTokens: the source pieces the tokenizer cannot cover, its <unk>,
   * as Python's source_unknown_tokens). Options: maxBatchSize,
   * batchType, maxInputLength, returnScores, targetPrefix and the decoding options (options.js). */
  async translateBatch(texts, options = {}) {
    const [own, given] = splitOptions(options, TEXT_DEFAULTS);
    const [langPrefix, langOptions] = this.languages(own.sourceLang, own.targetLang);
    const decoding = { ...langOptions, ...given };
    const opts = this.decodingOptions(decoding); // bad options fail before any work
    texts = this.checkTexts(texts);
    const prefixes = this.prefixes(own.targetPrefix, texts.length);
    const todo = texts.map((t, i) => i).filter((i) => !isBlank(texts[i])); // blank texts: the empty hypothesis
    const [sources, truncated] = this.sources(todo.map((i) => texts[i]), own.maxInputLength, todo, langPrefix);
    const hyps = await this.translateIds(sources, { maxBatchSize: own.maxBatchSize, batchType: own.batchType,
      targetPrefixIds: prefixes === null ? null : todo.map((i) => prefixes[i]), ...decoding });
    const zero = own.returnScores ? [0.0] : null;
    const results = texts.map(() => ({ hypotheses: [""], tokenIds: [[]], scores: zero, normalizedScores: zero,
      truncated: false, finished: [true], attention: opts.returnAttention ? [[]] : null, sourceUnknownTokens: 0 }));
    todo.forEach((i, j) => {
      const h = hyps[j];
      results[i] = {
        hypotheses: h.map((x) => this.detokenize(x.tokens)),
        tokenIds: h.map((x) => x.tokens),
        scores: own.returnScores ? h.map((x) => x.score) : null,
        normalizedScores: own.returnScores ? h.map((x) => x.normalizedScore) : null,
        truncated: truncated[j],
        finished: h.map((x) => x.finished),
        // per hypothesis [target tokens][source tokens + EOS] (an empty hypothesis, decoded in 0 steps, has none)
        attention: opts.returnAttention ? h.map((x) => (x.attention ?? []).map((row) => Array.from(row))) : null,
        sourceUnknownTokens: sources[j].filter((id) => id === this.config.unk_id).length,
      };
    });
    return results;
  }

  /** The best translation of one text (options as translateBatch; targetPrefix: one string). */
  async translate(text, options = {}) {
    const { targetPrefix = null, ...rest } = options;
    const [result] = await this.translateBatch([text], { ...rest, targetPrefix: targetPrefix === null ? null : [targetPrefix] });
    return result.hypotheses[0];
  }

  /** Stream the best translation of one text as text pieces; their concatenation is translate(text). Greedy and
   * sampling yield each token's text as it is chosen; beam search yields the prefix that every live beam and every
   * finished hypothesis share (no later step can change it), and the rest when the search ends.
   * Options: maxInputLength, targetPrefix (one string), sourceLang, targetLang and the decoding options. */
  async *generateTokens(text, options = {}) {
    const [own, decoding] = splitOptions(options, { maxInputLength: null, targetPrefix: null, sourceLang: null, targetLang: null });
    if ((decoding.numHypotheses ?? 1) !== 1) throw new RangeError("generateTokens streams one hypothesis: numHypotheses must be 1");
    const [langPrefix, langOptions] = this.languages(own.sourceLang, own.targetLang);
    const opts = decodingOptions({ ...this.package.generation, ...langOptions, ...decoding });
    [text] = this.checkTexts([text]);
    if (isBlank(text)) return; // as translate(): the empty translation
    const [sources] = this.sources([text], own.maxInputLength, null, langPrefix);
    const prefixes = own.targetPrefix === null ? null : this.prefixes([own.targetPrefix], 1);
    const steps = decodeSteps(this.engine, this.config, sources, opts, prefixes);
    let emitted = "", final;
    for (;;) {
      const { value, done } = await steps.next();
      if (done) {
        final = this.detokenize(value[0][0].tokens);
        break;
      }
      const shown = this.detokenize(commonPrefix(value.candidates(0)));
      // hold back a piece that ends inside a character, or that a later token rewrote
      if (shown.length > emitted.length && shown.startsWith(emitted) && !shown.endsWith("\uFFFD")) {
        yield shown.slice(emitted.length);
        emitted = shown;
      }
    }
    if (final.startsWith(emitted) && final.length > emitted.length) yield final.slice(emitted.length);
  }
}

export { Seq2OnnxError };
