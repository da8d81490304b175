// Option checks (src/options.js, translator.js) against the Python runtime's (runtime/options.py): every value the
// Python runtime refuses, the JS runtime refuses with a RangeError naming the option, and every value it accepts,
// the JS runtime accepts. Then the JS-only argument checks.
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { decodingOptions, Translator } from "../src/index.js";
import { MODEL_DIR, pythonOptions, runPython } from "./python.js";

const CASES = [
  {}, { beamSize: 1 }, { beamSize: 256 }, { beamSize: 0 }, { beamSize: 257 }, { beamSize: 2.5 }, { beamSize: "4" }, { beamSize: true },
  { beamSize: null }, { numHypotheses: 2 }, { beamSize: 4, numHypotheses: 4 }, { beamSize: 4, numHypotheses: 5 }, { numHypotheses: 0 },
  { lengthPenalty: 10 }, { lengthPenalty: -10 }, { lengthPenalty: 10.5 }, { lengthPenalty: Number.NaN }, { lengthPenalty: Infinity },
  { maxDecodingLength: 0 }, { maxDecodingLength: -1 }, { maxDecodingLength: 10, minDecodingLength: 10 },
  { maxDecodingLength: 10, minDecodingLength: 11 }, { minDecodingLength: -1 },
  { maxLengthA: 0 }, { maxLengthA: 1000 }, { maxLengthA: 1000.5 }, { maxLengthA: -0.1 }, { maxLengthB: null }, { maxLengthB: 0 },
  { maxLengthB: 2 ** 31 - 1 }, { maxLengthB: 2 ** 31 }, { maxLengthB: 1.5 },
  { beamSize: 1, samplingTopk: 0 }, { beamSize: 1, samplingTopk: 50 }, { samplingTopk: -1 }, { samplingTopk: 5 },
  { beamSize: 1, samplingTopk: 0, numHypotheses: 256 }, { beamSize: 1, samplingTopk: 0, numHypotheses: 257 },
  { samplingTopp: 1e-6 }, { samplingTopp: 1 }, { samplingTopp: 0 }, { samplingTopp: 1.01 },
  { samplingTemperature: 0 }, { samplingTemperature: 1e-4 }, { samplingTemperature: 1e-5 }, { samplingTemperature: 1e4 },
  { samplingTemperature: 10001 }, { repetitionPenalty: 1e-4 }, { repetitionPenalty: 1e4 }, { repetitionPenalty: 0 },
  { repetitionPenalty: 2e4 }, { noRepeatNgramSize: 0 }, { noRepeatNgramSize: 3 }, { noRepeatNgramSize: -1 },
  { seed: 0 }, { seed: null }, { seed: -1 }, { seed: 1.5 }, { seed: 2 ** 40 }, { beamSize: 4, bogus: 1 },
];

let python;
before(async () => {
  [{ errors: python }] = await runPython([{ op: "check_options", cases: CASES.map(pythonOptions) }]);
});

test("the JS runtime refuses exactly the options the Python runtime refuses", () => {
  const refusedBoth = [];
  CASES.forEach((options, i) => {
    let error = null;
    try {
      decodingOptions(options);
    } catch (e) {
      assert.ok(e instanceof RangeError, `${JSON.stringify(options)}: ${e}`);
      error = e.message;
    }
    assert.equal(error === null, python[i] === null,
      `${JSON.stringify(options)}: JS ${error === null ? "accepts" : `refuses (${error})`}, Python ${python[i] === null ? "accepts" : `refuses (${python[i]})`}`);
    if (error !== null) {
      const named = Object.keys(options).some((k) => error.includes(k));
      assert.ok(named, `${JSON.stringify(options)}: the message names the option: ${error}`);
      refusedBoth.push(options);
    }
  });
  assert.ok(refusedBoth.length >= 25, `${refusedBoth.length} refusals`);
});

test("the Translator's own arguments", async () => {
  const t = await Translator.load(MODEL_DIR);
  await assert.rejects(t.translateBatch("seven"), /texts must be an array of strings, got one string/);
  await assert.rejects(t.translateBatch(["seven", 7]), /texts\[1\] must be a string, got number/);
  await assert.rejects(t.translateBatch(["seven"], { beamSize: 0 }), /beamSize must be an integer in \[1, 256\], got 0/);
  await assert.rejects(t.translateBatch(["seven"], { maxBatchSize: -1 }), /maxBatchSize must be an integer >= 0/);
  await assert.rejects(t.translateBatch(["seven"], { batchType: "words" }), /batchType must be one of examples, tokens/);
  await assert.rejects(t.translateBatch(["seven"], { maxInputLength: 513 }), /maxInputLength must be an integer in \[1, 512\]/);
  await assert.rejects(t.translateBatch(["seven"], { targetPrefix: ["a", "b"] }), /targetPrefix must be an array of 1 strings/);
  await assert.rejects(t.translateBatch(["seven"], { beamsize: 4 }), /unknown option\(s\) beamsize; known: .*beamSize/);
  await assert.rejects(Translator.load(MODEL_DIR, { compute_type: "int8" }), /unknown option\(s\) compute_type; known: computeType, interThreads/);
  await assert.rejects(t.translateIds([[5, 300, 2]]), /sources\[0\] holds an id outside the vocabulary \[0, 200\): 300/);
  await assert.rejects(t.translateIds([[]]), /a source must hold 1\.\.512 ids, got 0/);
  await assert.rejects(async () => {
    for await (const piece of t.generateTokens("seven", { numHypotheses: 2 })) assert.fail(piece);
  }, /numHypotheses must be 1/);
  const warnings = [];
  const u = await Translator.load(MODEL_DIR, { onWarning: (m) => warnings.push(m) });
  const [r] = await u.translateBatch(["seven \ud800 hundred"]);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /input 0 is not valid Unicode \(lone surrogates\); they were replaced with U\+FFFD/);
  assert.equal(r.hypotheses.length, 1);
});
