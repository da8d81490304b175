// ModelConfig: the manifest's "config", checked as runtime/config.py checks it (field kinds, ranges, the
// special ids below vocab_size, d_model divisible by n_heads, dropout in [0, 1)).
import { isInteger, numberValue, short } from "./json.js";

// field -> kind, in runtime/config.py's order (errors name the first bad field, as Python does)
export const CONFIG_FIELDS = {
  vocab_size: "int", d_model: "int", n_heads: "int", d_ff: "int", encoder_layers: "int", decoder_layers: "int",
  dropout: "float", attention_dropout: "float", max_positions: "int", norm_first: "bool", layer_norm_eps: "float",
  share_embeddings: "bool", tie_output_embedding: "bool", pad_id: "int", bos_id: "int", eos_id: "int", unk_id: "int",
};

// Bounds of the numbers a runtime builds things from (runtime/config.py _RANGES): far above any real model,
// low enough that a model folder cannot make the runtime build billions of names or buffers.
const RANGES = {
  vocab_size: [1, 2 ** 24], d_model: [1, 2 ** 16], n_heads: [1, 2 ** 10], d_ff: [1, 2 ** 20],
  encoder_layers: [1, 1024], decoder_layers: [1, 1024], max_positions: [1, 2 ** 20],
  pad_id: [0, 2 ** 24], bos_id: [0, 2 ** 24], eos_id: [0, 2 ** 24], unk_id: [0, 2 ** 24],
  layer_norm_eps: [1e-12, 1.0],
};

function checkField(name, kind, value) {
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

/** fields (the manifest's config object) -> a frozen plain config with headDim; RangeError when bad. */
export function configFromObject(fields) {
  const unknown = Object.keys(fields).filter((k) => !Object.hasOwn(CONFIG_FIELDS, k)).sort();
  if (unknown.length) throw new RangeError(`unknown ModelConfig fields: ${unknown.join(", ")}`);
  const config = {};
  for (const [name, kind] of Object.entries(CONFIG_FIELDS)) config[name] = checkField(name, kind, fields[name]);
  for (const name of ["pad_id", "bos_id", "eos_id", "unk_id"]) {
    if (config[name] >= config.vocab_size) {
      throw new RangeError(`${name} must be below vocab_size (${config.vocab_size}), got ${config[name]}`);
    }
  }
  if (config.d_model % config.n_heads !== 0) {
    throw new RangeError(`d_model (${config.d_model}) must be divisible by n_heads (${config.n_heads})`);
  }
  for (const name of ["dropout", "attention_dropout"]) {
    if (!(config[name] >= 0 && config[name] < 1)) throw new RangeError("dropout and attention_dropout must be in [0, 1)");
  }
  config.head_dim = config.d_model / config.n_heads;
  return Object.freeze(config);
}
