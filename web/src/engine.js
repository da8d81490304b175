// The decoder-step contracts this runtime reads, one engine class each, and the sessions they run on.
//
// A package's manifest format_version names the contract of its decoder step graph (runtime/package/graph_io.py): 1 and 2 are
// contracts 1 and 2, 3 is 2's with ModelConfig's variant fields, two tokenizers, languages and generation defaults,
// and 4 is 3 with contract 3 (runtime/package/manifest.py DECODER_OF_FORMAT):
//   1  past_key_i / past_value_i [R, H, P, Dh] in, present_* [R, H, P+1, Dh] out: the cache grows every step.
//   2  a fixed-capacity cache: past_length (int64, 0-d) in, past_* [R, H, C, Dh] in and present_* [R, H, C, Dh] out,
//      the step's K/V written at position past_length; and cross_attention [R, S] out (read for returnAttention).
//   3  2 with past_length int64 [R], one per row (row r written at past_length[r]): the cache keeps each row's written
//      length, so rows that join a batch (DecoderState.extend) start at 0 beside rows that have stepped.
// ENGINES maps each decoder step contract to its engine (decoderFormat: the contract of a format_version), so a new
// contract is one more class here that names its graph I/O and implements encode / step / take.
//
// The engine hides where tensors live and how the decoder is called; decoder_state.js and decoding.js see only:
//   encode(inputIds BigInt64Array [B*S], attentionMask BigInt64Array [B*S], [B, S]) -> [encoderMask, cross]
//   step(inputIds BigInt64Array [R], encoderMask, past | null, cross, withAttention = false)
//       -> [logProbs Float32Array [R*V], present, attention Float32Array [R*S] | null]
//       encoderMask and cross have R rows, or with crossPerSentence R / G (the G beams of a sentence share them);
//       attention (hasAttention engines, when asked): the last decoder layer's cross-attention, heads averaged
//   noAttentionError() -> the error for returnAttention on an engine without hasAttention
//   take(values, index) -> values gathered along their first axis (a cache with its rows' lengths)
//   appendRows(values, more) -> masks [B, S] and cross K/V [B, H, S, Dh] of new rows after these, the shorter source
//       axis padded (the mask hides it); appendEmptyCache(cache, n) -> the cache with n rows of length 0 after its own
//       (DecoderState.extend: rows joining)
//   release() -> the sessions' native memory and threads freed
//   and the flags and names of decoder_state.js EngineBase, from which engines derive: crossPerSentence,
//   rowsAtOwnPositions, decoderPathFor(rows) (the graph named when it returns NaN log-probs)
// A format-2 engine steps with the variant's few-rows decoder step (manifest few_rows: the int8 variant's second
// step, faster at 1-4 rows) whenever a step has at most its maxRows rows, as runtime/engine/cpu.py does.
import { ModelPackageError, printable, Seq2OnnxError } from "./errors.js";
import { EngineBase } from "./decoder_state.js";
import { ExternalGraph } from "./external_data.js";

export function cacheNames(prefix, layers) {
  const names = [];
  for (let i = 0; i < layers; i++) names.push(`${prefix}_key_${i}`, `${prefix}_value_${i}`);
  return names;
}

const REEXPORT = "re-export the model";
const ID_INPUTS = ["input_ids", "attention_mask", "encoder_attention_mask"]; // int64 [batch, len]

/** Gather `tensor` (an ort.Tensor) along its first axis by `index`. */
function gatherRows(ort, tensor, index) {
  const rowSize = tensor.dims.slice(1).reduce((a, b) => a * b, 1);
  const src = tensor.data;
  const out = new src.constructor(index.length * rowSize);
  for (let r = 0; r < index.length; r++) out.set(src.subarray(index[r] * rowSize, (index[r] + 1) * rowSize), r * rowSize);
  return new ort.Tensor(tensor.type, out, [index.length, ...tensor.dims.slice(1)]);
}

/** a's rows, then b's (ort.Tensors of one type: masks [B, S], cross K/V [B, H, S, Dh]), the shorter source axis (1 of a
 * mask, 2 of K/V) padded with zeros: a mask's 0 hides the padded positions (runtime/engine/cache_memory.py append_padded). */
function appendPadded(ort, a, b) {
  const axis = a.dims.length === 2 ? 1 : 2;
  const length = Math.max(a.dims[axis], b.dims[axis]);
  const inner = a.dims.slice(axis + 1).reduce((x, y) => x * y, 1); // elements per source position
  const outer = (t) => t.dims.slice(0, axis).reduce((x, y) => x * y, 1); // blocks of [S, ...] in a tensor
  const out = new a.data.constructor((outer(a) + outer(b)) * length * inner);
  let block = 0;
  for (const t of [a, b]) {
    const size = t.dims[axis] * inner;
    for (let i = 0; i < outer(t); i++, block++) out.set(t.data.subarray(i * size, (i + 1) * size), block * length * inner);
  }
  const dims = [...a.dims];
  dims[0] += b.dims[0];
  dims[axis] = length;
  return new ort.Tensor(a.type, out, dims);
}

/** format_version 1: the self-attention cache grows by one position a step (docs/CONTRACTS.md, ONNX graphs). */
export class GrowingCacheEngine extends EngineBase {
  static decoderFormat = 1;
  hasAttention = false; // no cross_attention output

  noAttentionError() {
    return new Seq2OnnxError(`${this.decoderPath} has no cross-attention output (a format_version 1 package): re-export ` +
      "the model with `seq2onnx export` to get attention and alignments");
  }

  /** graph -> [input names, output names] of the contract for `config` */
  static io(config) {
    const n = config.decoder_layers;
    return {
      encoder: [["input_ids", "attention_mask"], cacheNames("cross", n)],
      decoder_step: [["input_ids", "encoder_attention_mask", ...cacheNames("past", n), ...cacheNames("cross", n)],
        ["log_probs", ...cacheNames("present", n)]],
    };
  }

  /** [type, dims] an input or output must have (null: any size) */
  static spec(name, config) {
    if (ID_INPUTS.includes(name)) return ["int64", [null, null]];
    if (name === "log_probs") return ["float32", [null, null]];
    return ["float32", [null, config.n_heads, null, config.head_dim]];
  }

  /** outputsInto: the onnxruntime binding writes outputs into tensors the caller allocates (onnxruntime-node does;
   * onnxruntime-web's WASM backend does not fill them) */
  constructor(ort, encoder, decoder, config, { crossPerSentence = false, decoderPath = "the decoder step graph", outputsInto = false,
    fewRows = null } = {}) {
    // fewRows: { session, maxRows, path } of the few-rows decoder step, or null
    super();
    Object.assign(this, { ort, encoder, decoder, config, crossPerSentence, decoderPath, outputsInto, fewRows });
    const io = this.constructor.io(config);
    this.crossNames = io.encoder[1];
    this.pastNames = cacheNames("past", config.decoder_layers);
    this.presentNames = cacheNames("present", config.decoder_layers);
  }

  async encode(inputIds, attentionMask, dims) {
    const { ort } = this;
    const mask = new ort.Tensor("int64", attentionMask, dims);
    const out = await this.encoder.run({ input_ids: new ort.Tensor("int64", inputIds, dims), attention_mask: mask });
    return [mask, this.crossNames.map((name) => out[name])];
  }

  async step(inputIds, encoderMask, past, cross) {
    const { ort, config } = this;
    const rows = inputIds.length;
    if (past === null) {
      const empty = new ort.Tensor("float32", new Float32Array(0), [rows, config.n_heads, 0, config.head_dim]);
      past = this.pastNames.map(() => empty);
    }
    const feeds = { input_ids: new ort.Tensor("int64", inputIds, [rows, 1]), encoder_attention_mask: encoderMask };
    this.pastNames.forEach((name, i) => (feeds[name] = past[i]));
    this.crossNames.forEach((name, i) => (feeds[name] = cross[i]));
    let out;
    if (this.outputsInto) { // onnxruntime writes the outputs into buffers allocated here: no copy after the run
      const cacheDims = [rows, config.n_heads, past[0].dims[2] + 1, config.head_dim];
      const cacheSize = cacheDims.reduce((a, b) => a * b, 1);
      const fetches = { log_probs: new ort.Tensor("float32", new Float32Array(rows * config.vocab_size), [rows, config.vocab_size]) };
      for (const name of this.presentNames) fetches[name] = new ort.Tensor("float32", new Float32Array(cacheSize), cacheDims);
      out = await this.decoder.run(feeds, fetches);
    } else {
      out = await this.decoder.run(feeds);
    }
    return [out.log_probs.data, this.presentNames.map((name) => out[name]), null];
  }

  take(values, index) {
    return values.map((v) => gatherRows(this.ort, v, index));
  }

  appendRows(values, more) {
    return values.map((v, i) => appendPadded(this.ort, v, more[i]));
  }

  /** The session that steps `rows` rows: the few-rows step up to its maxRows, else the step. */
  decoderFor(rows) {
    return this.fewRows !== null && rows <= this.fewRows.maxRows ? this.fewRows.session : this.decoder;
  }

  decoderPathFor(rows) {
    return this.decoderFor(rows) === this.decoder ? this.decoderPath : this.fewRows.path;
  }

  async release() {
    await Promise.all([this.encoder.release(), this.decoder.release(), ...(this.fewRows ? [this.fewRows.session.release()] : [])]);
  }
}

const PAST_LENGTH = "past_length";
const CROSS_ATTENTION = "cross_attention";
const FIXED_CACHE_START = 16; // positions a fresh format-2 cache holds; it doubles when full (runtime/engine/session.py)

/** A format-2/3 cache: its tensors [R, H, capacity, Dh] and the positions each row has written, lengths
 * BigInt64Array [R] (contract 2: every row alike). */
class FixedCache {
  constructor(tensors, lengths) {
    Object.assign(this, { tensors, lengths });
  }

  /** The most positions a row has written. */
  longest() {
    let n = 0n;
    for (const length of this.lengths) if (length > n) n = length;
    return Number(n);
  }
}

/** format_version 2: the cache has a fixed capacity, the step writes its K/V at past_length; the capacity starts at
 * FIXED_CACHE_START and doubles when full (at most max_positions), as runtime/engine/session.py's engines do, so that the
 * graph attends over the same shapes as in Python. */
export class FixedCacheEngine extends GrowingCacheEngine {
  static decoderFormat = 2;
  hasAttention = true;

  static io(config) {
    const io = super.io(config);
    io.decoder_step[0].splice(2, 0, PAST_LENGTH);
    io.decoder_step[1].push(CROSS_ATTENTION);
    return io;
  }

  static spec(name, config) {
    if (name === PAST_LENGTH) return ["int64", []];
    if (name === CROSS_ATTENTION) return ["float32", [null, null]];
    return super.spec(name, config);
  }

  /** The capacity that holds `length` + 1 positions, from `capacity` now. */
  capacityFor(length, capacity) {
    while (capacity <= length) capacity = Math.max(FIXED_CACHE_START, 2 * capacity);
    return Math.min(capacity, this.config.max_positions);
  }

  /** The cache this step writes into: `past`, moved into a larger one when it is full; zeros at first. */
  fixedCache(past, rows) {
    const { ort, config } = this, h = config.n_heads, dh = config.head_dim;
    if (past === null) {
      const capacity = this.capacityFor(0, 0);
      const zeros = () => new ort.Tensor("float32", new Float32Array(rows * h * capacity * dh), [rows, h, capacity, dh]);
      return new FixedCache(this.pastNames.map(zeros), new BigInt64Array(rows));
    }
    const capacity = past.tensors[0].dims[2];
    const longest = past.longest();
    if (longest < capacity) return past;
    const bigger = this.capacityFor(longest, capacity);
    return new FixedCache(past.tensors.map((t) => {
      const out = new Float32Array(rows * h * bigger * dh); // the rest: zeros the mask hides
      for (let i = 0; i < rows * h; i++) out.set(t.data.subarray(i * capacity * dh, (i + 1) * capacity * dh), i * bigger * dh);
      return new ort.Tensor("float32", out, [rows, h, bigger, dh]);
    }), past.lengths);
  }

  /** The past_length input of contract 2: the positions every row has written, 0-d. */
  pastLength(cache) {
    return new this.ort.Tensor("int64", cache.lengths.slice(0, 1), []);
  }

  async step(inputIds, encoderMask, past, cross, withAttention = false) {
    const { ort, config } = this;
    const rows = inputIds.length;
    const cache = this.fixedCache(past, rows);
    const feeds = { input_ids: new ort.Tensor("int64", inputIds, [rows, 1]), encoder_attention_mask: encoderMask,
      [PAST_LENGTH]: this.pastLength(cache) };
    this.pastNames.forEach((name, i) => (feeds[name] = cache.tensors[i]));
    this.crossNames.forEach((name, i) => (feeds[name] = cross[i]));
    let out;
    if (this.outputsInto) { // onnxruntime writes the outputs into buffers given here: each present_i into past_i's
      // own buffer, so the step writes its K/V in place and no step copies the cache (runtime/engine/cpu.py binds so)
      const fetches = { log_probs: new ort.Tensor("float32", new Float32Array(rows * config.vocab_size), [rows, config.vocab_size]) };
      this.presentNames.forEach((name, i) => (fetches[name] = cache.tensors[i]));
      if (withAttention) {
        const srcLen = encoderMask.dims[1];
        fetches[CROSS_ATTENTION] = new ort.Tensor("float32", new Float32Array(rows * srcLen), [rows, srcLen]);
      }
      out = await this.decoderFor(rows).run(feeds, fetches);
    } else {
      out = await this.decoderFor(rows).run(feeds, ["log_probs", ...this.presentNames, ...(withAttention ? [CROSS_ATTENTION] : [])]);
    }
    return [out.log_probs.data, new FixedCache(this.presentNames.map((name) => out[name]), cache.lengths.map((n) => n + 1n)),
      withAttention ? out[CROSS_ATTENTION].data : null];
  }

  take(values, index) {
    if (values instanceof FixedCache) {
      return new FixedCache(super.take(values.tensors, index), BigInt64Array.from(index, (r) => values.lengths[r]));
    }
    return super.take(values, index);
  }

  /** The cache with n rows that have written nothing (length 0, zeros) after its own. */
  appendEmptyCache(cache, n) {
    const { ort } = this;
    const tensors = cache.tensors.map((t) => {
      const out = new Float32Array((t.dims[0] + n) * t.dims.slice(1).reduce((a, b) => a * b, 1));
      out.set(t.data);
      return new ort.Tensor("float32", out, [t.dims[0] + n, ...t.dims.slice(1)]);
    });
    const lengths = new BigInt64Array(cache.lengths.length + n);
    lengths.set(cache.lengths);
    return new FixedCache(tensors, lengths);
  }
}

/** format_version 4 (decoder step contract 3): FixedCacheEngine with past_length int64 [R], each row's own length, so
 * rows may stand at different positions in one step. */
export class RowLengthsEngine extends FixedCacheEngine {
  static decoderFormat = 3;
  rowsAtOwnPositions = true;

  static spec(name, config) {
    if (name === PAST_LENGTH) return ["int64", [null]];
    return super.spec(name, config);
  }

  /** The past_length input of contract 3: each row's written positions, [R]. */
  pastLength(cache) {
    return new this.ort.Tensor("int64", cache.lengths, [cache.lengths.length]);
  }
}

export const ENGINES = new Map([[1, GrowingCacheEngine], [2, FixedCacheEngine], [3, RowLengthsEngine]]);
// the manifest format_versions this runtime reads and the decoder step contract (an ENGINES key) of each
// (runtime/package/manifest.py READ_FORMAT_VERSIONS and DECODER_OF_FORMAT; test/schema.test.js compares them)
const DECODER_OF_FORMAT = new Map([[1, 1], [2, 2], [3, 2], [4, 3]]);
export const READ_FORMAT_VERSIONS = [...DECODER_OF_FORMAT.keys()];

/** The decoder step contract (an ENGINES key) of a package of this format_version (runtime/package/manifest.py decoder_format). */
export function decoderFormat(formatVersion) {
  return DECODER_OF_FORMAT.get(formatVersion);
}

/** A session of a graph as the package read it: its bytes, or an ExternalGraph (external_data.js), whose data file's
 * bytes onnxruntime gets with them. */
async function openSession(ort, graph, where, sessionOptions) {
  try {
    // onnxruntime copies the data file's weights into the session (test/external_data.test.js checks it), so the
    // caller lets go of them once it is built, as runtime/engine/session.py does
    return await ort.InferenceSession.create(...(graph instanceof ExternalGraph
      ? [graph.model, graph.sessionOptions(sessionOptions)] : [graph, sessionOptions]));
  } catch (e) {
    throw new ModelPackageError(`${where}: onnxruntime cannot load it (${printable(String(e.message).split("\n")[0])}); ${REEXPORT}`);
  }
}

/** The session's inputs and outputs are the contract's for `config` (runtime/engine/session.py check_graph_io): names,
 * types, ranks, and heads and head_dim in every cross K/V and cache. */
function checkGraphIo(Engine, session, where, graph, config) {
  const [inputs, outputs] = Engine.io(config)[graph];
  const gotIn = [...session.inputNames], gotOut = [...session.outputNames];
  const same = (a, b) => a.length === b.length && [...a].sort().every((x, i) => x === [...b].sort()[i]);
  if (!same(gotIn, inputs) || !same(gotOut, outputs)) {
    throw new ModelPackageError(`${where}: graph inputs/outputs ${JSON.stringify(gotIn)} -> ${JSON.stringify(gotOut)} do ` +
      `not match the ${graph} contract of decoder format ${Engine.decoderFormat} for ${config.decoder_layers} decoder ` +
      `layers; ${REEXPORT}`);
  }
  for (const meta of [...(session.inputMetadata ?? []), ...(session.outputMetadata ?? [])]) {
    const [type, want] = Engine.spec(meta.name, config);
    const dims = meta.shape ?? [];
    const bad = !meta.isTensor || meta.type !== type || dims.length !== want.length ||
      dims.some((d, i) => typeof d === "number" && d >= 0 && want[i] !== null && d !== want[i]);
    if (bad) {
      throw new ModelPackageError(`${where}: its ${meta.name} is ${meta.type} ${JSON.stringify(dims)}, the contract and the ` +
        `config (n_heads ${config.n_heads}, d_model ${config.d_model}) want ${type} ` +
        `${JSON.stringify(want.map((w) => w ?? "*"))}: the graph and the config do not belong together; ${REEXPORT}`);
    }
  }
}

/** Which graphs' intra-op threads spin while they wait for work (runtime/engine/session.py SPINNING): the decoder step's,
 * which runs hundreds of small parallel sections per translation; not the encoder's, which runs once per call and
 * whose spinning threads would take a core from the decoder's. */
export const SPINNING = { encoder: false, decoder_step: true };

/** "1.30.0" -> [1, 30, 0]; the leading numbers of a development version (runtime/engine/session.py onnxruntime_version). */
export function versionNumbers(version) {
  const numbers = [];
  for (const part of String(version ?? "").split(".")) {
    if (!/^\d+$/.test(part)) break;
    numbers.push(Number(part));
  }
  return numbers;
}

/** a >= b, as version number lists ([1, 30] >= [1, 22]). */
export function versionAtLeast(a, b) {
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0);
  }
  return true;
}

/** A variant whose graphs need a newer onnxruntime (its attention.min_onnxruntime: fused attention ops) is refused in
 * one line, as runtime/engine/session.py check_onnxruntime does: an older one loads them and computes wrong log-probs. An
 * onnxruntime whose version cannot be read is refused too. */
export function checkOnnxruntime(ort, needed, what, packageName) {
  const text = String(ort.env?.versions?.common ?? "unknown");
  const version = versionNumbers(text);
  if (needed.length === 0 || (version.length > 0 && versionAtLeast(version, needed))) return;
  const want = needed.join(".");
  throw new Seq2OnnxError(`${what} needs onnxruntime >= ${want} (its graphs use onnxruntime's fused attention ops), ` +
    `this is ${text}: npm install "${packageName}@>=${want}"`);
}

/** Whether this onnxruntime runs a variant's few-rows step (its min_onnxruntime; an unknown version: no). */
export function runsFewRows(ort, fewRows) {
  const version = versionNumbers(ort.env?.versions?.common);
  return fewRows !== null && version.length > 0 && versionAtLeast(version, fewRows.minOnnxruntime);
}

/** A decoder step session's checks beyond its I/O: the log-probs cover exactly the tokenizer's ids, and cross K/V
 * once per sentence needs a graph whose cross inputs have their own batch axis (Translator._check_graph_vocab,
 * _check_graph_cross_axis). */
function checkDecoder(pkg, decoder, decoderPath) {
  const { config } = pkg;
  const meta = Object.fromEntries((decoder.inputMetadata ?? []).concat(decoder.outputMetadata ?? []).map((m) => [m.name, m.shape ?? []]));
  const width = meta.log_probs?.at(-1);
  if (typeof width === "number" && width >= 0 && width !== config.vocab_size) {
    throw new ModelPackageError(`${decoderPath}: the graph scores ${width} tokens per step but ${pkg.describe()} has a ` +
      `tokenizer and config of ${config.vocab_size}: the tokenizer does not belong to this model; re-export the model ` +
      "with `seq2onnx export`");
  }
  if (pkg.crossPerSentence) {
    const rows = meta.input_ids?.[0], sentences = meta.encoder_attention_mask?.[0];
    if (typeof rows === "string" && rows === sentences) {
      throw new ModelPackageError(`${decoderPath}: the manifest says the decoder step takes cross K/V once per sentence, ` +
        `but the graph's encoder_attention_mask and input_ids share the batch axis '${rows}': the graph and the manifest ` +
        "do not belong together; re-export the model with `seq2onnx export`");
    }
  }
}

/** The engine of a package variant. read(file): the package's reader of a graph's checked bytes (pkg.readGraph),
 * called for each graph right before its session is built and let go of once it is, so that one graph's bytes at a
 * time are held beside the sessions (runtime/engine/loader.py open_engine; onnxruntime keeps its own copy).
 * fewRows: build the variant's few-rows step too. sessionOptions(graph): the onnxruntime session options of
 * "encoder" and "decoder_step". */
export async function openEngine(pkg, variantName, read, sessionOptions, fewRows = false) {
  const { config } = pkg, ort = pkg.platform.ort;
  const Engine = ENGINES.get(pkg.decoderFormat);
  const variant = pkg.variants[variantName];
  const session = async (file, graph) => {
    const where = pkg.describe(file);
    const built = await openSession(ort, await read(file), where, sessionOptions(graph));
    checkGraphIo(Engine, built, where, graph, config);
    if (graph === "decoder_step") checkDecoder(pkg, built, where);
    return built;
  };
  const decoderPath = pkg.describe(variant.decoderStep);
  const encoder = await session(variant.encoder, "encoder");
  const decoder = await session(variant.decoderStep, "decoder_step");
  let steps = null;
  if (fewRows) {
    const fewPath = pkg.describe(variant.fewRows.decoderStep);
    if (Engine.decoderFormat < 2) {
      throw new ModelPackageError(`${fewPath}: a few-rows decoder step needs a format_version 2 package and the caches of ` +
        `its decoder step; ${REEXPORT}`);
    }
    steps = { session: await session(variant.fewRows.decoderStep, "decoder_step"), maxRows: variant.fewRows.maxRows,
      path: fewPath };
  }
  return new Engine(ort, encoder, decoder, config, { crossPerSentence: pkg.crossPerSentence, decoderPath,
    outputsInto: pkg.platform.outputsInto === true, fewRows: steps });
}
