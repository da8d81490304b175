// Decoding options (runtime/options.py), in JS naming, checked once with the same ranges (docs/CONTRACTS.md
// "Decoding options and their ranges"): a value outside its range is a RangeError naming the option, the range
// and the value, thrown before any work. The ceilings keep the arithmetic defined.

export const MAX_BEAM_SIZE = 256; // beamSize, and numHypotheses when sampling
const LENGTH_PENALTY_RANGE = [-10, 10];
const MAX_LENGTH_A = 1000;
const MAX_LENGTH_B = 2 ** 31 - 1;
const MIN_TOPP = 1e-6;
const TEMPERATURE_RANGE = [1e-4, 1e4]; // or exactly 0 (argmax)
const REPETITION_PENALTY_RANGE = [1e-4, 1e4];
const BEAM_RULES = ["seq2onnx", "transformers"]; // when beam search finishes hypotheses and stops
const MAX_SUPPRESS_IDS = 2 ** 24;
export const DEFAULT_MAX_BATCH_SIZE = 32; // examples per batch: memory stays that of one batch
// A text is never tokenized whole, only a prefix of at most maxInputLength x MAX_CHARS_PER_TOKEN characters
export const MAX_CHARS_PER_TOKEN = 64;

// name -> default, in runtime/options.py's order
export const DECODING_DEFAULTS = Object.freeze({
  beamSize: 4, // 1 = greedy (or sampling)
  numHypotheses: 1, // n-best: <= beamSize; with sampling, that many samples
  lengthPenalty: 1.0, // rank by score / length ** lengthPenalty
  maxDecodingLength: 256, // max steps (tokens, EOS included)
  minDecodingLength: 0, // EOS forbidden before this many tokens
  maxLengthA: 3.0, // fairseq's relative limit a * srcLen + b steps (srcLen counts EOS); a = 0, b = null: off
  maxLengthB: 10,
  samplingTopk: 1, // 1: argmax; 0: sample from the whole vocabulary; k: from the best k
  samplingTopp: 1.0, // nucleus: keep the smallest set of mass >= p
  samplingTemperature: 1.0, // 0: argmax
  repetitionPenalty: 1.0, // log-probs of already generated tokens are multiplied by it
  noRepeatNgramSize: 0, // 0: off; n: no n-gram appears twice
  seed: null, // sampling seed; null: fresh entropy
  returnAttention: false, // keep each hypothesis's cross-attention rows (format_version 2 packages)
  // generation as transformers' generate() does it (a converted package's manifest "generation")
  beamRules: "seq2onnx", // "transformers": its _beam_search's finished set and stopping rule
  earlyStopping: false, // transformers rules: false (heuristic), true (K finished), "never"
  suppressIds: null, // ids never generated; null: PAD and BOS
  forcedBosId: null, // the first generated token, log-prob 0 (M2M100/NLLB target language)
  forcedEos: false, // at the last step the length limit allows, EOS only, log-prob 0
  renormalize: false, // log-softmax again after every filter (transformers' renormalize_logits)
});

const show = (v) => (typeof v === "string" ? JSON.stringify(v) : v === undefined ? "undefined" : String(v));

export function checkInt(name, value, low, high = null) {
  const ok = typeof value === "number" && Number.isInteger(value) && value >= low && (high === null || value <= high);
  if (!ok) throw new RangeError(`${name} must be an integer ${high === null ? `>= ${low}` : `in [${low}, ${high}]`}, got ${show(value)}`);
}

function checkFloat(name, value, allowed, test) {
  if (!(typeof value === "number" && Number.isFinite(value) && test(value))) {
    throw new RangeError(`${name} must be a number ${allowed}, got ${show(value)}`);
  }
}

/** The decoding options, defaults filled in and every range checked; an unknown name is a RangeError
 * listing the known ones. Sampling is on when samplingTopk != 1 (CTranslate2's convention). */
export function decodingOptions(given = {}) {
  const unknown = Object.keys(given).filter((k) => !Object.hasOwn(DECODING_DEFAULTS, k)).sort();
  if (unknown.length) {
    throw new RangeError(`unknown decoding option(s) ${unknown.join(", ")}; known: ${Object.keys(DECODING_DEFAULTS).sort().join(", ")}`);
  }
  const o = { ...DECODING_DEFAULTS };
  for (const [k, v] of Object.entries(given)) if (v !== undefined) o[k] = v;
  if (given.maxLengthB === null) o.maxLengthB = null;
  checkInt("beamSize", o.beamSize, 1, MAX_BEAM_SIZE);
  checkInt("maxDecodingLength", o.maxDecodingLength, 0);
  checkInt("minDecodingLength", o.minDecodingLength, 0, o.maxDecodingLength);
  const [lpLow, lpHigh] = LENGTH_PENALTY_RANGE;
  checkFloat("lengthPenalty", o.lengthPenalty, `in [${lpLow}, ${lpHigh}]`, (x) => lpLow <= x && x <= lpHigh);
  checkFloat("maxLengthA", o.maxLengthA, `in [0, ${MAX_LENGTH_A}]`, (x) => x >= 0 && x <= MAX_LENGTH_A);
  if (o.maxLengthB !== null) checkInt("maxLengthB", o.maxLengthB, 0, MAX_LENGTH_B);
  checkInt("samplingTopk", o.samplingTopk, 0);
  checkFloat("samplingTopp", o.samplingTopp, `in [${MIN_TOPP}, 1]`, (x) => x >= MIN_TOPP && x <= 1);
  const [tLow, tHigh] = TEMPERATURE_RANGE;
  checkFloat("samplingTemperature", o.samplingTemperature, `0 or in [${tLow}, ${tHigh}]`, (x) => x === 0 || (tLow <= x && x <= tHigh));
  const [rLow, rHigh] = REPETITION_PENALTY_RANGE;
  checkFloat("repetitionPenalty", o.repetitionPenalty, `in [${rLow}, ${rHigh}]`, (x) => rLow <= x && x <= rHigh);
  checkInt("noRepeatNgramSize", o.noRepeatNgramSize, 0);
  if (o.seed !== null) checkInt("seed", o.seed, 0);
  if (typeof o.returnAttention !== "boolean") throw new RangeError(`returnAttention must be true or false, got ${show(o.returnAttention)}`);
  if (!BEAM_RULES.includes(o.beamRules)) {
    throw new RangeError(`beamRules must be one of ${BEAM_RULES.map((r) => `'${r}'`).join(", ")}, got ${show(o.beamRules)}`);
  }
  if (![true, false, "never"].includes(o.earlyStopping)) {
    throw new RangeError(`earlyStopping must be true, false or 'never', got ${show(o.earlyStopping)}`);
  }
  if (o.earlyStopping !== false && o.beamRules !== "transformers") {
    throw new RangeError("earlyStopping applies to beamRules='transformers' only; set beamRules='transformers' or leave it false");
  }
  if (o.suppressIds !== null) {
    if (!Array.isArray(o.suppressIds)) throw new RangeError(`suppressIds must be a list of ids (int), got ${show(o.suppressIds)}`);
    if (o.suppressIds.length > MAX_SUPPRESS_IDS) {
      throw new RangeError(`suppressIds must hold at most ${MAX_SUPPRESS_IDS} ids, got ${o.suppressIds.length}`);
    }
    const bad = o.suppressIds.find((x) => !(typeof x === "number" && Number.isInteger(x) && x >= 0));
    if (bad !== undefined) throw new RangeError(`suppressIds must hold ids (int >= 0), got ${show(bad)}`);
    o.suppressIds = Object.freeze([...o.suppressIds]);
  }
  if (o.forcedBosId !== null) checkInt("forcedBosId", o.forcedBosId, 0);
  for (const name of ["forcedEos", "renormalize"]) {
    if (typeof o[name] !== "boolean") throw new RangeError(`${name} must be true or false, got ${show(o[name])}`);
  }
  o.sampling = o.samplingTopk !== 1;
  if (o.sampling) {
    if (o.beamSize !== 1) {
      throw new RangeError(`sampling (samplingTopk=${o.samplingTopk}) needs beamSize=1, got beamSize=${o.beamSize}`);
    }
    checkInt("numHypotheses", o.numHypotheses, 1, MAX_BEAM_SIZE);
  } else {
    checkInt("numHypotheses", o.numHypotheses, 1, o.beamSize);
  }
  return Object.freeze(o);
}
