// ModelConfig: the manifest's "config", checked as runtime/package/config.py checks it (field kinds, choices, ranges, the
// special ids and decoder_start_id below vocab_size, src_vocab_size with shared embeddings, d_model divisible by
// n_heads, dropout in [0, 1)).
import { isInteger, numberValue, short } from "./json.js";

// field -> kind (runtime/package/config.py's annotations: int, float, bool, str (one of CHOICES), Optional[int] (null or an
// int)), in runtime/package/config.py's order (errors name the first bad field, as Python does); test/schema.test.js checks
// these constants against Python's
export const CONFIG_FIELDS = {
  vocab_size: "int", d_model: "int", n_heads: "int", d_ff: "int", encoder_layers: "int", decoder_layers: "int",
  dropout: "float", attention_dropout: "float", max_positions: "int", norm_first: "bool", layer_norm_eps: "float",
  share_embeddings: "bool", tie_output_embedding: "bool", pad_id: "int", bos_id: "int", eos_id: "int", unk_id: "int",
  // the variants of models trained elsewhere (format_version 3; a package of format 1 or 2 reads as these defaults)
  activation: "str", sinusoid: "str", position_offset: "int", embed_scale: "bool", final_logits_bias: "bool",
  decoder_start_id: "Optional[int]", src_vocab_size: "Optional[int]",
};

// the defaults of the fields a package of format_version 1 or 2 lacks (runtime/package/manifest.py FORMAT_3_CONFIG): the paper's
export const FORMAT_3_DEFAULTS = Object.freeze({
  activation: "relu", sinusoid: "interleaved", position_offset: 0, embed_scale: true, final_logits_bias: false,
  decoder_start_id: null, src_vocab_size: null,
});

export const CHOICES = { activation: ["relu", "gelu", "swish"], sinusoid: ["interleaved", "halves", "fairseq"] };

// Bounds of the numbers a runtime builds things from (runtime/package/config.py _RANGES): far above any real model,
// low enough that a model folder cannot make the runtime build billions of names or buffers.
export const RANGES = {
  vocab_size: [1, 2 ** 24], d_model: [1, 2 ** 16], n_heads: [1, 2 ** 10], d_ff: [1, 2 ** 20],
  encoder_layers: [1, 1024], decoder_layers: [1, 1024], max_positions: [1, 2 ** 20],
  pad_id: [0, 2 ** 24], bos_id: [0, 2 ** 24], eos_id: [0, 2 ** 24], unk_id: [0, 2 ** 24],
  layer_norm_eps: [1e-12, 1.0], position_offset: [0, 2 ** 24], decoder_start_id: [0, 2 ** 24],
  src_vocab_size: [1, 2 ** 24],
};

function checkField(name, kind, value) {
  if (kind === "Optional[int]") {
    if (value === null) return value;
    kind = "int";
  }
  if (kind === "str") {
    if (!CHOICES[name].includes(value)) throw new RangeError(`${name} must be one of ${CHOICES[name].join(", ")}, got ${short(value)}`);
    return value;
  }
  if (kind === "bool") {
    if (typeof value !== "boolean") throw new RangeError(`${name} must be true or false, got ${short(value)}`);
    return value;
  }
  const [low, high] = RANGES[name] ?? [-Infinity, Infinity];
  const number = kind === "int" ? (isInteger(value) ? value : null) : numberValue(value);
  if (number === null || !Number.isFinite(number) || number < low || number > high) {
    const what = kind === "int" ? "an integer" : "a finite number";
    throw new RangeError(`${name} must be ${what}${name in RANGES ? ` in [${low}, ${high}]` : ""}, got ${short(value)}`);
  }
  return number;
}

/** fields (the manifest's config object; a FORMAT_3_DEFAULTS field missing is its default) -> a frozen plain config
 * with head_dim, start_id (the decoder's first input) and source_vocab_size (source ids are below it); RangeError
 * when bad. */
export function configFromObject(fields) {
  const unknown = Object.keys(fields).filter((k) => !Object.hasOwn(CONFIG_FIELDS, k)).sort();
  if (unknown.length) throw new RangeError(`unknown ModelConfig fields: ${unknown.join(", ")}`);
  const config = {};
  for (const [name, kind] of Object.entries(CONFIG_FIELDS)) {
    const value = Object.hasOwn(fields, name) || !Object.hasOwn(FORMAT_3_DEFAULTS, name) ? fields[name] : FORMAT_3_DEFAULTS[name];
    config[name] = checkField(name, kind, value);
  }
  for (const name of ["pad_id", "bos_id", "eos_id", "unk_id"]) {
    if (config[name] >= config.vocab_size) {
      throw new RangeError(`${name} must be below vocab_size (${config.vocab_size}), got ${config[name]}`);
    }
  }
  if (config.decoder_start_id !== null && config.decoder_start_id >= config.vocab_size) {
    throw new RangeError(`decoder_start_id must be below vocab_size (${config.vocab_size}), got ${config.decoder_start_id}`);
  }
  if (config.src_vocab_size !== null && config.share_embeddings && config.src_vocab_size !== config.vocab_size) {
    throw new RangeError(`share_embeddings needs src_vocab_size == vocab_size, got ${config.src_vocab_size} and ${config.vocab_size}`);
  }
  if (config.d_model % config.n_heads !== 0) {
    throw new RangeError(`d_model (${config.d_model}) must be divisible by n_heads (${config.n_heads})`);
  }
  for (const name of ["dropout", "attention_dropout"]) {
    if (!(config[name] >= 0 && config[name] < 1)) throw new RangeError("dropout and attention_dropout must be in [0, 1)");
  }
  config.head_dim = config.d_model / config.n_heads;
  config.start_id = config.decoder_start_id ?? config.bos_id;
  config.source_vocab_size = config.src_vocab_size ?? config.vocab_size;
  return Object.freeze(config);
}
