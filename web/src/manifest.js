// Read and check a model package folder (docs/CONTRACTS.md "Model package", docs/SECURITY.md), as
// runtime/package/manifest.py does, on a platform (platform_node.js: a folder; platform_browser.js: a URL):
//   readPackage(platform, source)   manifest.json (at most MAX_MANIFEST_BYTES, nested at most MAX_JSON_DEPTH deep):
//                                   its schema, every field's type and range, format_version (the versions this
//                                   runtime has an engine for: engine.js); every listed file present, of its
//                                   size, with a plain name (nothing outside the folder); the config; the
//                                   tokenizer, or the source and the target one (each's SHA-256 checked, its vocab
//                                   and special tokens against the config); languages and generation defaults
//                                   (format_version 3: manifest_records.js); then the whole manifest against the
//                                   schema the Python runtime's records emit (schema.js, manifest_schema.js)
//   pkg.readVariant(name)           the bytes of the variant's two graphs, SHA-256 checked: what onnxruntime loads
//                                   (pkg.readGraph(file): one of them, or a few-rows step); a graph with external
//                                   data comes with its data file's checked bytes (external_data.js)
// A model folder is untrusted input. Each file is read once and its SHA-256 checked on exactly the bytes that
// are then used. Every failure is one ModelPackageError line naming the file, the field and the fix.
import { configFromObject, CONFIG_FIELDS, FORMAT_3_DEFAULTS } from "./config.js";
import { decoderFormat, READ_FORMAT_VERSIONS } from "./engine.js";
import { ModelPackageError } from "./errors.js";
import { isInteger, JsonDepthError, parseJson, short } from "./json.js";
import { Languages, readGeneration, tokenizerNames } from "./manifest_records.js";
import { externalGraph, MAX_DATA_BYTES, readVariantField } from "./external_data.js";
import { externalTensors } from "./onnx_bytes.js";
import { checkSchema } from "./schema.js";
import { PackageTokenizer } from "./tokenizer.js";

export const FORMAT = "seq2onnx-model";
export const MANIFEST = "manifest.json";
export const REEXPORT = "re-export the model with `seq2onnx export`";
export const MAX_MANIFEST_BYTES = 2 ** 20;
export const MAX_JSON_DEPTH = 32;
export const MAX_FILE_BYTES = 2 ** 31 - 1; // protobuf's limit: onnxruntime loads no larger graph (without external data)
export { MAX_DATA_BYTES }; // any listed file: a graph's data file may be larger (external_data.js)
export const MAX_TOKENIZER_BYTES = 2 ** 28;
export const MAX_STRING_CHARS = 4096; // any string of the manifest, keys included (runtime/package/manifest.py)
export const MAX_FILES = 64; // entries of 'files'
export const MAX_VARIANTS = 32; // entries of 'variants'
export const SHA256 = /^[0-9a-f]{64}$/;
export const FILE_NAME = /^[A-Za-z0-9._+-]{1,255}$/; // names in 'files': in the folder, nothing else
export const VERSION = /^\d{1,4}(\.\d{1,4}){0,3}$/; // attention.min_onnxruntime, few_rows.min_onnxruntime: "1.22"
export const MAX_FEW_ROWS = 2 ** 16; // a variant's few_rows.max_rows: any value only picks a graph
// variant status -> why the variant was not held to the export's thresholds
export const UNCHECKED = {
  "validation-skipped": "was exported with --skip-int8-validation",
  "unchecked-on-CUDA": "was not checked against PyTorch (no GPU at export)",
};
export const STATUSES = ["checked", ...Object.keys(UNCHECKED)];
const KIND_NAMES = { object: "an object", string: "a string", int: "an integer", bool: "true or false" };
const REQUIRED = Symbol("required");

function kindOf(value, kind) {
  if (kind === "object") return value !== null && typeof value === "object" && !Array.isArray(value) && !(value instanceof Number);
  if (kind === "string") return typeof value === "string";
  if (kind === "int") return isInteger(value);
  return typeof value === "boolean";
}

/** obj[key], which must be of `kind` (a bool is no integer, 1.0 is none). With a default, a missing or null
 * field gives the default (runtime/package/manifest.py _field). */
function field(obj, key, kind, where, name = key, fallback = REQUIRED) {
  const present = Object.hasOwn(obj, key);
  const value = present ? obj[key] : undefined;
  if ((value === undefined || value === null) && fallback !== REQUIRED) return fallback;
  if (!present) throw new ModelPackageError(`${where}: the field ${name} is missing; ${REEXPORT}`);
  if (!kindOf(value, kind)) {
    throw new ModelPackageError(`${where}: the field ${name} should be ${KIND_NAMES[kind]}, got ${short(value)}; ${REEXPORT}`);
  }
  return value;
}

/** The first string (a value or a key) of parsed JSON over MAX_STRING_CHARS characters, or null (one pass). */
function longString(value) {
  const stack = [value];
  while (stack.length) {
    const v = stack.pop();
    if (typeof v === "string") {
      if (v.length > MAX_STRING_CHARS) return v;
    } else if (v !== null && typeof v === "object") {
      if (Array.isArray(v)) stack.push(...v);
      else for (const [k, item] of Object.entries(v)) stack.push(k, item);
    }
  }
  return null;
}

/** obj[key], an object of at most `limit` entries (runtime/package/manifest.py _count). */
function count(obj, key, limit, where) {
  const entries = field(obj, key, "object", where);
  const n = Object.keys(entries).length;
  if (n > limit) {
    throw new ModelPackageError(`${where}: '${key}' has ${n} entries, more than a package holds (${limit}): ` +
      `this is not a seq2onnx model package; ${REEXPORT}`);
  }
  return entries;
}

async function readManifest(platform, root) {
  const where = platform.describe(root, MANIFEST);
  const data = await platform.readFile(root, MANIFEST, MAX_MANIFEST_BYTES,
    `${where} is missing: ${platform.describe(root)} is not a seq2onnx model package; ${REEXPORT}`);
  if (data.length > MAX_MANIFEST_BYTES) {
    throw new ModelPackageError(`${where} has more than ${MAX_MANIFEST_BYTES} bytes, more than a manifest holds: this ` +
      `is not a seq2onnx model package; ${REEXPORT}`);
  }
  let manifest;
  try {
    manifest = parseJson(new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(data), MAX_JSON_DEPTH);
  } catch (e) {
    if (e instanceof JsonDepthError) {
      throw new ModelPackageError(`${where} nests lists and objects more than ${MAX_JSON_DEPTH} levels deep, deeper than ` +
        `a manifest: this is not a seq2onnx model package; ${REEXPORT}`);
    }
    throw new ModelPackageError(`${where} is not valid JSON (${e.message}); ${REEXPORT}`);
  }
  const long = longString(manifest);
  if (long !== null) {
    throw new ModelPackageError(`${where} holds a string of ${long.length} characters (starting ${short(long.slice(0, 40))}), ` +
      `more than a manifest's ${MAX_STRING_CHARS}: this is not a seq2onnx model package; ${REEXPORT}`);
  }
  if (!kindOf(manifest, "object") || manifest.format !== FORMAT) {
    const got = kindOf(manifest, "object") ? manifest.format : Array.isArray(manifest) ? "list" : typeof manifest;
    throw new ModelPackageError(`${where}: format is ${short(got)}, not '${FORMAT}': this is not a seq2onnx model package`);
  }
  const version = manifest.format_version;
  if (!isInteger(version) || !READ_FORMAT_VERSIONS.includes(version)) {
    const newer = isInteger(version) && version > Math.max(...READ_FORMAT_VERSIONS);
    const fix = newer ? "upgrade the seq2onnx JS package (update its checkout, then npm install it again)" : REEXPORT;
    const readable = `${READ_FORMAT_VERSIONS.slice(0, -1).join(", ")} and ${READ_FORMAT_VERSIONS.at(-1)}`;
    throw new ModelPackageError(`${where}: format_version ${short(version)} is unknown; this runtime reads ` +
      `format_version ${readable}: ${fix}`);
  }
  return manifest;
}

function readConfig(where, manifest) {
  const fields = field(manifest, "config", "object", where);
  for (const name of Object.keys(CONFIG_FIELDS)) { // no defaults here (the graphs were built from these), but for the
    // fields format_version 3 added: an earlier package reads as their defaults
    if (!Object.hasOwn(fields, name) && (manifest.format_version >= 3 || !Object.hasOwn(FORMAT_3_DEFAULTS, name))) {
      throw new ModelPackageError(`${where}: the field config.${name} is missing; ${REEXPORT}`);
    }
  }
  try {
    return configFromObject(fields);
  } catch (e) {
    throw new ModelPackageError(`${where}: bad model config (${e.message}); ${REEXPORT}`);
  }
}

function missingListed(platform, root, name) {
  return `${platform.describe(root, name)} is missing (listed in ${MANIFEST}); copy the whole package folder or ${REEXPORT}`;
}

/** The values of `promises`, or the rejection of the first of them in their order that rejects: the reads run at
 * once, but which error a package gets never depends on which read ends first. It is the error the Python runtime,
 * which reads them one after another in that order, raises. */
export async function inOrder(promises) {
  for (const p of promises) p.catch(() => {}); // a later one's rejection counts only if no earlier one rejects
  const values = [];
  for (const p of promises) values.push(await p);
  return values;
}

async function checkFiles(platform, root, where, manifest) {
  const files = count(manifest, "files", MAX_FILES, where);
  // each file's fields, then its presence and size, file by file in the manifest's order (runtime/package/manifest.py
  // _check_files): a file's checks fail before any later file's
  await inOrder(Object.entries(files).map(async ([name, entry]) => {
    if (!FILE_NAME.test(name) || name === "." || name === ".." || name === MANIFEST) {
      throw new ModelPackageError(`${where}: bad file name ${short(name)} in 'files'; ${REEXPORT}`);
    }
    if (!kindOf(entry, "object")) throw new ModelPackageError(`${where}: files['${name}'] needs 'sha256' and 'bytes'; ${REEXPORT}`);
    const sha256 = field(entry, "sha256", "string", where, `files['${name}']['sha256']`);
    const size = field(entry, "bytes", "int", where, `files['${name}']['bytes']`);
    if (!SHA256.test(sha256) || !(size >= 0 && size <= MAX_DATA_BYTES)) { // graphs: readGraph's limit
      throw new ModelPackageError(`${where}: files['${name}'] should have a 'sha256' of 64 hex digits and 'bytes' in ` +
        `[0, ${MAX_DATA_BYTES}], got ${short(entry)}; ${REEXPORT}`);
    }
    // present, regular, of the listed size (the browser: present, and of that size where the server says)
    const onDisk = await platform.fileSize(root, name, missingListed(platform, root, name));
    if (onDisk !== null && onDisk !== size) {
      throw new ModelPackageError(`${platform.describe(root, name)} has ${onDisk} bytes, ${MANIFEST} says ${size} ` +
        `(truncated or changed); copy the package again or ${REEXPORT}`);
    }
  }));
}

function readVariants(where, manifest) {
  const variants = {};
  const dataFiles = {}; // graph file -> its data file, over all variants
  for (const [name, entry] of Object.entries(count(manifest, "variants", MAX_VARIANTS, where))) {
    const label = `variants[${short(name)}]`;
    if (!kindOf(entry, "object")) throw new ModelPackageError(`${where}: ${label} is not an object; ${REEXPORT}`);
    const graphs = {};
    for (const graph of ["encoder", "decoder_step"]) {
      const file = entry[graph];
      if (typeof file !== "string" || !Object.hasOwn(manifest.files, file)) {
        throw new ModelPackageError(`${where}: ${label}['${graph}'] = ${short(file)} is not a file listed in 'files'; ${REEXPORT}`);
      }
      graphs[graph] = file;
    }
    const precision = field(entry, "precision", "string", where, `${label}['precision']`, name);
    const parity = field(entry, "parity", "object", where, `${label}['parity']`, {});
    const status = field(entry, "status", "string", where, `${label}['status']`, "checked");
    if (!STATUSES.includes(status)) {
      throw new ModelPackageError(`${where}: ${label}['status'] should be one of ${STATUSES.join(", ")}, got ${short(status)}; ${REEXPORT}`);
    }
    // the onnxruntime its graphs need (the int8 variant's fused attention ops); [] none
    const attention = field(entry, "attention", "object", where, `${label}['attention']`, {});
    const minOnnxruntime = readVersion(attention, where, `${label}['attention']`, "");
    const fewRows = readFewRows(where, manifest, entry, label);
    const files = [graphs.encoder, graphs.decoder_step, ...(fewRows ? [fewRows.decoderStep] : [])];
    const externalData = readVariantField(entry, manifest.files, files, where, label, dataFiles, REEXPORT);
    variants[name] = Object.freeze({ name, encoder: graphs.encoder, decoderStep: graphs.decoder_step, precision, parity, status,
      minOnnxruntime, fewRows, externalData });
  }
  if (!Object.hasOwn(variants, "fp32")) throw new ModelPackageError(`${where}: no 'fp32' variant; ${REEXPORT}`);
  return variants;
}

/** A variant's few_rows (runtime/package/manifest.py _read_few_rows): its second decoder step for steps of at most maxRows
 * rows, a file listed in 'files'; null in packages without one. */
function readFewRows(where, manifest, entry, label) {
  const few = field(entry, "few_rows", "object", where, `${label}['few_rows']`, null);
  if (few === null) return null;
  const file = few.decoder_step;
  if (typeof file !== "string" || !Object.hasOwn(manifest.files, file)) {
    throw new ModelPackageError(`${where}: ${label}['few_rows']['decoder_step'] = ${short(file)} is not a file listed in ` +
      `'files'; ${REEXPORT}`);
  }
  const maxRows = field(few, "max_rows", "int", where, `${label}['few_rows']['max_rows']`);
  if (!(maxRows >= 1 && maxRows <= MAX_FEW_ROWS)) {
    throw new ModelPackageError(`${where}: ${label}['few_rows']['max_rows'] should be in [1, ${MAX_FEW_ROWS}], got ` +
      `${short(maxRows)}; ${REEXPORT}`);
  }
  return Object.freeze({ decoderStep: file, maxRows, minOnnxruntime: readVersion(few, where, `${label}['few_rows']`) });
}

/** obj's min_onnxruntime (runtime/package/manifest.py _version): "1.21" -> [1, 21]; with a fallback, a missing or empty
 * one -> [] (no need). */
function readVersion(obj, where, label, fallback = REQUIRED) {
  const needs = field(obj, "min_onnxruntime", "string", where, `${label}['min_onnxruntime']`, fallback);
  if (needs && !VERSION.test(needs)) {
    throw new ModelPackageError(`${where}: ${label}['min_onnxruntime'] should be a version such as 1.21, got ` +
      `${short(needs)}; ${REEXPORT}`);
  }
  return needs ? needs.split(".").map(Number) : [];
}

/** graphs.decoder_step.cross_per_sentence: true, or absent / false (packages exported before it existed). */
function readCrossPerSentence(where, manifest) {
  const graphs = field(manifest, "graphs", "object", where, "graphs", {});
  const decoder = field(graphs, "decoder_step", "object", where, "graphs.decoder_step", {});
  return field(decoder, "cross_per_sentence", "bool", where, "graphs.decoder_step.cross_per_sentence", false);
}

/** The fields only shown to people (seq2onnx info): of the kinds they are shown as. */
function checkDescribedFields(where, manifest) {
  for (const key of ["seq2onnx_version", "created"]) field(manifest, key, "string", where, key, null);
  for (const key of ["opset", "ir_version"]) field(manifest, key, "int", where, key, null);
  const exporter = field(manifest, "exporter", "object", where, "exporter", {});
  for (const key of Object.keys(exporter)) field(exporter, key, "string", where, `exporter[${short(key)}]`);
  const source = field(manifest, "source_checkpoint", "object", where, "source_checkpoint", {});
  field(source, "file", "string", where, "source_checkpoint.file", null);
  field(source, "train_meta", "object", where, "source_checkpoint.train_meta", null);
}

export class ModelPackage {
  constructor(platform, root, manifest, config, variants, crossPerSentence, verify) {
    Object.assign(this, { platform, root, manifest, config, variants, crossPerSentence, verify });
    this.decoderFormat = decoderFormat(manifest.format_version); // which decoder step contract the graphs follow (engine.js)
    this.tokenizer = null; // encodes source texts (the one tokenizer, or the source one)
    this.tokenizerFiles = []; // the tokenizer files: [one] or [source, target]
    this.targetTokenizer = null; // decodes output ids (null: `tokenizer`)
    this.languages = null; // Languages (manifest_records.js), or null
    this.languageIds = {}; // languages.tokens as ids
    this.generation = {}; // the default decoding options (JS names)
    this.sharedReads = new Map(); // "name|verify" -> the read of a data file several graphs name (readGraph)
  }

  /** The tokenizer that turns output ids into text (and target texts into ids). */
  get detokenizer() {
    return this.targetTokenizer ?? this.tokenizer;
  }

  describe(name) {
    return this.platform.describe(this.root, name);
  }

  /** The bytes of `name`, read once: of the size the manifest lists and, when verify, of its SHA-256. */
  async readFile(name, verify = this.verify) {
    const { bytes: size, sha256 } = this.manifest.files[name];
    const data = await this.platform.readFile(this.root, name, size, missingListed(this.platform, this.root, name));
    if (data.length !== size) {
      throw new ModelPackageError(`${this.describe(name)} has ${data.length > size ? "more than " : ""}${data.length} bytes, ` +
        `${MANIFEST} says ${size} (truncated or changed); copy the package again or ${REEXPORT}`);
    }
    if (verify && (await this.platform.sha256(data)) !== sha256) {
      throw new ModelPackageError(`${this.describe(name)}: its SHA-256 does not match ${MANIFEST} (the file is corrupt or ` +
        `was changed); copy the package again or ${REEXPORT}`);
    }
    return data;
  }

  /** [encoder bytes, decoder step bytes] of a variant (readGraph). */
  async readVariant(name, verify = this.verify) {
    const variant = this.variants[name];
    // read at once; the encoder's error first, as runtime/package/manifest.py read_variant reads it first
    return inOrder([variant.encoder, variant.decoderStep].map((file) => this.readGraph(file, verify)));
  }

  /** The bytes of one of the package's graphs (readFile); for a graph with external data, an ExternalGraph: its bytes
   * with the data file its variants name for it, read and checked the same way (external_data.js). */
  async readGraph(file, verify = this.verify) {
    const size = this.manifest.files[file].bytes;
    if (size > MAX_FILE_BYTES) {
      throw new ModelPackageError(`${this.describe(file)}: ${MANIFEST} lists ${size} bytes, more than onnxruntime loads ` +
        `as one graph (${MAX_FILE_BYTES}); ${REEXPORT}`);
    }
    const data = await this.readFile(file, verify);
    let tensors;
    try {
      tensors = externalTensors(data);
    } catch (e) {
      throw new ModelPackageError(`${this.describe(file)} is not a valid ONNX model (${e.message}); ${REEXPORT}`);
    }
    const dataName = Object.values(this.variants).find((v) => Object.hasOwn(v.externalData, file))?.externalData[file];
    if (!tensors.length) return data;
    if (dataName === undefined) {
      throw new ModelPackageError(`${this.describe(file)} keeps weights in external data files, which the package's ` +
        `checksums do not cover: no variant's external_data names a data file for it; ${REEXPORT}`);
    }
    // a data file several graphs name (a variant's shared data file) is read once while they load (releaseShared)
    const users = Object.values(this.variants).flatMap((v) => Object.keys(v.externalData)
      .filter((graph) => v.externalData[graph] === dataName));
    let weights;
    if (new Set(users).size < 2) {
      weights = await this.readFile(dataName, verify);
    } else {
      const key = `${dataName}|${verify}`;
      if (!this.sharedReads.has(key)) this.sharedReads.set(key, this.readFile(dataName, verify));
      weights = await this.sharedReads.get(key);
    }
    return externalGraph(data, tensors, this.describe(file), dataName, weights, REEXPORT);
  }

  /** Let go of the shared data files read (readGraph): onnxruntime copied them into the sessions built. */
  releaseShared() {
    this.sharedReads.clear();
  }
}

/** The tokenizer file `name`, of exactly `vocabSize` ids (its config field: vocabName), with the package's special
 * tokens (runtime/package/manifest.py _read_tokenizer). */
async function readTokenizer(pkg, name, vocabSize, vocabName) {
  const where = pkg.describe(MANIFEST), { manifest, config } = pkg;
  if (!Object.hasOwn(manifest.files, name)) {
    throw new ModelPackageError(`${where}: the tokenizer ${short(name)} is not listed in 'files'; ${REEXPORT}`);
  }
  const path = pkg.describe(name);
  if (manifest.files[name].bytes > MAX_TOKENIZER_BYTES) {
    throw new ModelPackageError(`${path} has ${manifest.files[name].bytes} bytes, more than a tokenizer may have ` +
      `(${MAX_TOKENIZER_BYTES}); ${REEXPORT}`);
  }
  const data = await pkg.readFile(name);
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(data); // a BOM stays: no JSON, as in Python
  } catch {
    throw new ModelPackageError(`${path} is not a tokenizers JSON file (not UTF-8); ${REEXPORT}`);
  }
  const tokenizer = new PackageTokenizer(text, path, { vocab_size: vocabSize, vocabName, manifestVocabSize: manifest.vocab_size }, { reexport: REEXPORT });
  tokenizer.checkManifest(manifest, config, where, REEXPORT);
  return tokenizer;
}

/** The manifest's tokenizer: one file, or a source and a target one (Marian), each of its side's vocabulary. */
async function readTokenizers(pkg) {
  const where = pkg.describe(MANIFEST), { manifest, config } = pkg;
  const KIND = { object: "a file name or an object" };
  if (!Object.hasOwn(manifest, "tokenizer")) throw new ModelPackageError(`${where}: the field tokenizer is missing; ${REEXPORT}`);
  const value = manifest.tokenizer;
  if (typeof value !== "string" && !kindOf(value, "object")) {
    throw new ModelPackageError(`${where}: the field tokenizer should be ${KIND.object}, got ${short(value)}; ${REEXPORT}`);
  }
  const names = tokenizerNames(value, where, REEXPORT);
  pkg.tokenizerFiles = [...new Set([names.source, names.target])];
  const ownSource = config.source_vocab_size !== config.vocab_size;
  pkg.tokenizer = await readTokenizer(pkg, names.source, config.source_vocab_size, ownSource ? "src_vocab_size" : "vocab_size");
  if (names.target !== names.source) {
    pkg.targetTokenizer = await readTokenizer(pkg, names.target, config.vocab_size, "vocab_size");
  } else if (ownSource) {
    throw new ModelPackageError(`${where}: the model has a source vocabulary of its own (config.src_vocab_size) but one ` +
      `tokenizer; ${REEXPORT}`);
  }
}

/** languages, each of its tokens an id of the tokenizer that carries it: the source one for source tokens and Marian's
 * target tags (they start the source), the target one for a forced first target token (runtime/package/manifest.py
 * _read_languages). */
function readLanguages(pkg) {
  const where = pkg.describe(MANIFEST);
  const value = field(pkg.manifest, "languages", "object", where, "languages", null);
  if (value === null) return;
  const langs = (pkg.languages = Languages.fromManifest(value, where, REEXPORT));
  for (const [code, token] of Object.entries(langs.tokens)) {
    const onTarget = langs.target.includes(code) && langs.targetToken === "forced_bos" &&
      !(langs.source.includes(code) && langs.sourceToken);
    const id = (onTarget ? pkg.detokenizer : pkg.tokenizer).tokenToId(token);
    if (id === undefined) {
      throw new ModelPackageError(`${where}: languages.tokens[${short(code)}] = ${short(token)} is not a token of the ` +
        `${onTarget ? "target" : "source"} tokenizer; ${REEXPORT}`);
    }
    pkg.languageIds[code] = id;
  }
}

/** Read and check a package (a folder in Node, a URL in the browser); see the top of this file. */
export async function readPackage(platform, source, { verify = true } = {}) {
  const root = await platform.root(source);
  const manifest = await readManifest(platform, root);
  const where = platform.describe(root, MANIFEST);
  const config = readConfig(where, manifest);
  await checkFiles(platform, root, where, manifest);
  const variants = readVariants(where, manifest);
  const crossPerSentence = readCrossPerSentence(where, manifest);
  checkDescribedFields(where, manifest);
  const pkg = new ModelPackage(platform, root, manifest, config, variants, crossPerSentence, verify);
  await readTokenizers(pkg);
  readLanguages(pkg);
  pkg.generation = readGeneration(field(manifest, "generation", "object", where, "generation", {}), where, REEXPORT);
  checkSchema(manifest, where, REEXPORT); // the fields read by hand above are checked; the rest (graphs, source_model...)
  return pkg;
}
