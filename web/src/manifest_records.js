// The manifest fields of format_version 3 (runtime/package/manifest_records.py, where the rules are written; test/schema.test.js
// checks the constants here against Python's):
//   tokenizerNames   "tokenizer": one file for both sides, or {"source": ..., "target": ...} (Marian's two
//                    SentencePiece models): source texts are encoded with the source one, output ids decoded with the
//                    target one
//   Languages        "languages": the codes a model translates from and into, and how a language reaches the model (a
//                    source prefix token, a forced first target token)
//   readGeneration   "generation": the decoding options translateBatch starts from (a converted model's
//                    generation_config: what `model.generate()` does with no arguments), checked by options.js
// Every failure is one ModelPackageError line naming the field, as in Python.
import { ModelPackageError } from "./errors.js";
import { JsonFloat, short } from "./json.js";
import { DECODING_DEFAULTS, decodingOptions } from "./options.js";

export const MAX_LANGUAGES = 4096; // codes per side
export const LANGUAGE_CODE = "[A-Za-z0-9_.@-]{1,32}"; // en, deu, pt_BR, eng_Latn, zh-Hant (a whole code)
const LANGUAGE_CODE_RE = new RegExp(`^(?:${LANGUAGE_CODE})$`);
export const TARGET_TOKEN = ["source_prefix", "forced_bos"]; // how the target language reaches the model
export const LANGUAGE_FIELDS = ["source", "target", "tokens", "source_token", "target_token", "default_source", "default_target"];

/** beamSize -> beam_size: the manifest's (Python's) name of a JS option. */
export const snakeCase = (name) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const camelCase = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());
// generation: the decoding options a package may set as its defaults, as the manifest names them (not the per-call
// ones: seed, returnAttention)
export const GENERATION_FIELDS = Object.keys(DECODING_DEFAULTS).filter((k) => k !== "seed" && k !== "returnAttention")
  .map(snakeCase);
// the options of runtime/options.py's kind float: there an integer is a fine float, and the manifest's 1.0 (a
// JsonFloat, which options.js's checks refuse as they refuse 4.0 for an int option) is read as the number 1
export const FLOAT_OPTIONS = ["length_penalty", "max_length_a", "sampling_topp", "sampling_temperature", "repetition_penalty"];

const KINDS = {
  object: (v) => v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof Number),
  string: (v) => typeof v === "string",
};

/** runtime/package/manifest_records.py _bad: the value shown cut at 60 characters (manifest.js's messages cut at 57). */
function bad(where, name, should, got, reexport) {
  return new ModelPackageError(`${where}: the field ${name} should be ${should}, got ${short(got, 60)}; ${reexport}`);
}

/** The manifest's "tokenizer" (a file name, or an object) -> {source, target} file names. */
export function tokenizerNames(value, where, reexport) {
  if (typeof value === "string") return { source: value, target: value };
  if (KINDS.object(value)) {
    const keys = Object.keys(value).sort();
    if (keys.length === 2 && keys[0] === "source" && keys[1] === "target" && keys.every((k) => typeof value[k] === "string")) {
      return { source: value.source, target: value.target };
    }
  }
  throw bad(where, "tokenizer", 'a file name or {"source": file, "target": file}', value, reexport);
}

/** "de, fr and 3 more" (at most `most` codes named), or "none recorded". */
function listed(codes, most = 12) {
  if (!codes.length) return "none recorded";
  return codes.slice(0, most).join(", ") + (codes.length > most ? ` and ${codes.length - most} more` : "");
}

/** source/target: the language codes (as the model's users know them: "de", "fra", "eng_Latn"); tokens: code -> its
 * token in the vocabulary; sourceToken: the source language's token starts the source ids (M2M100, NLLB);
 * targetToken: "source_prefix" (Marian's >>fra<< before the source text), "forced_bos" (M2M100, NLLB: the first
 * generated token, log-prob 0), or null; defaultSource/defaultTarget: the language used when a call names none. */
export class Languages {
  constructor(fields) {
    Object.assign(this, fields);
    Object.freeze(this);
  }

  /** The manifest's "languages", every field checked (runtime/package/manifest_records.py Languages.from_manifest). */
  static fromManifest(value, where, reexport) {
    if (!KINDS.object(value)) throw bad(where, "languages", "an object", value, reexport);
    const unknown = Object.keys(value).filter((k) => !LANGUAGE_FIELDS.includes(k)).sort();
    if (unknown.length) {
      throw bad(where, `languages.${unknown[0]}`, "absent (this runtime does not know it)", value[unknown[0]], reexport);
    }
    const codes = {};
    for (const side of ["source", "target"]) {
      const got = value[side];
      if (!Array.isArray(got) || got.length > MAX_LANGUAGES || !got.every((c) => typeof c === "string" && LANGUAGE_CODE_RE.test(c))) {
        throw bad(where, `languages.${side}`, `a list of at most ${MAX_LANGUAGES} language codes`, got, reexport);
      }
      codes[side] = got;
    }
    const tokens = Object.hasOwn(value, "tokens") ? value.tokens : {};
    const known = new Set([...codes.source, ...codes.target]);
    if (!KINDS.object(tokens) || !Object.entries(tokens).every(([code, t]) => typeof t === "string" && known.has(code))) {
      throw bad(where, "languages.tokens", "an object from the model's language codes to tokens", tokens, reexport);
    }
    const sourceToken = Object.hasOwn(value, "source_token") ? value.source_token : false;
    if (typeof sourceToken !== "boolean") throw bad(where, "languages.source_token", "true or false", sourceToken, reexport);
    const targetToken = value.target_token ?? null;
    if (targetToken !== null && !TARGET_TOKEN.includes(targetToken)) {
      throw bad(where, "languages.target_token", `null or one of ${TARGET_TOKEN.join(", ")}`, targetToken, reexport);
    }
    const needs = [...(sourceToken ? codes.source : []), ...(targetToken !== null ? codes.target : [])];
    const missing = needs.find((c) => !Object.hasOwn(tokens, c));
    if (missing !== undefined) {
      throw bad(where, "languages.tokens", `a token for each language (none for ${short(missing)})`, tokens, reexport);
    }
    const defaults = {};
    for (const side of ["source", "target"]) {
      const d = value[`default_${side}`] ?? null;
      if (d !== null && !codes[side].includes(d)) {
        throw bad(where, `languages.default_${side}`, `null or one of languages.${side}`, d, reexport);
      }
      defaults[side] = d;
    }
    return new Languages({ source: Object.freeze([...codes.source]), target: Object.freeze([...codes.target]),
      tokens: Object.freeze({ ...tokens }), sourceToken, targetToken, defaultSource: defaults.source,
      defaultTarget: defaults.target });
  }

  /** The language of `side` a call asks for (arg: its option, sourceLang / targetLang), or the default; a one-line
   * RangeError (TypeError) for a code the model lacks, or for none where the model needs one. */
  pick(side, code, arg) {
    const known = side === "source" ? this.source : this.target;
    if (code === null || code === undefined) {
      code = (side === "source" ? this.defaultSource : this.defaultTarget) ?? (known.length === 1 ? known[0] : null);
      const needed = side === "source" ? this.sourceToken : this.targetToken !== null;
      if (code === null && needed) {
        throw new RangeError(`${arg} is needed: this model translates ${side === "source" ? "from" : "into"} ` +
          `${known.length} languages (${listed(known)})`);
      }
      return code;
    }
    if (typeof code !== "string") throw new TypeError(`${arg} must be a language code (a string), got ${typeof code}`);
    if (!known.includes(code)) {
      throw new RangeError(`${arg} ${JSON.stringify(code.length > 40 ? `${code.slice(0, 40)}...` : code)} is not a ` +
        `${side} language of this model; it has ${listed(known)} (seq2onnx info MODEL lists them)`);
    }
    return code;
  }
}

/** The manifest's "generation" -> the JS decoding options it sets (camelCase names), each passing options.js's own
 * checks (runtime/package/manifest_records.py read_generation). */
export function readGeneration(value, where, reexport) {
  if (!KINDS.object(value)) throw bad(where, "generation", "an object of decoding options", value, reexport);
  const unknown = Object.keys(value).filter((k) => !GENERATION_FIELDS.includes(k)).sort();
  if (unknown.length) {
    throw bad(where, `generation.${unknown[0]}`, `one of the decoding options (${GENERATION_FIELDS.join(", ")})`,
      value[unknown[0]], reexport);
  }
  const options = {};
  for (const [name, v] of Object.entries(value)) {
    options[camelCase(name)] = FLOAT_OPTIONS.includes(name) && v instanceof JsonFloat ? v.valueOf() : v;
  }
  try {
    decodingOptions(options);
  } catch (e) {
    throw new ModelPackageError(`${where}: the field generation holds a bad decoding option (${e.message}); ${reexport}`);
  }
  return Object.freeze(options);
}
