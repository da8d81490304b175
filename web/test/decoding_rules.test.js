// beamRules "transformers" and the generation filters (suppressIds, forcedBosId, forcedEos, renormalize,
// earlyStopping) in Node against the Python runtime on the shipped model: the same tokens up to ties, scores within
// the bound tests/agreement.py derives (compare.js). The Python side is checked against transformers' generate()
// itself in tests/runtime/decode/test_beam_rules.py; here JS must equal it.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { normalize32, transformersDone } from "../src/decoding.js";
import { forceToken, renormalize } from "../src/logit_filters.js";
import { decodingOptions } from "../src/options.js";
import { Translator } from "../src/index.js";
import { assertSameTranslations } from "./compare.js";
import { MODEL_DIR, numberTexts, ODD_LINES, pythonOptions, runPython } from "./python.js";

const FIXED = { maxLengthA: 0, maxLengthB: null }; // one absolute limit, as transformers' max_length
const CASES = [
  { beamSize: 4, beamRules: "transformers", lengthPenalty: 1.0, numHypotheses: 2 },
  { beamSize: 4, beamRules: "transformers", earlyStopping: "never", lengthPenalty: 2.0, maxDecodingLength: 9, forcedEos: true, ...FIXED },
  { beamSize: 4, beamRules: "transformers", earlyStopping: true, lengthPenalty: 0.6, numHypotheses: 3, suppressIds: [0, 1, 4],
    forcedBosId: 7, renormalize: true, minDecodingLength: 3 },
  { beamSize: 4, beamRules: "transformers", lengthPenalty: 1.0, maxDecodingLength: 4, ...FIXED }, // most end at the limit
  { beamSize: 1, forcedBosId: 7, forcedEos: true, maxDecodingLength: 6, suppressIds: [], renormalize: true, ...FIXED },
];

describe("transformers' beam rules and the generation filters, Node against Python", () => {
  test("the shipped model, fp32: equal ids up to ties, scores within the derived bound", async (t) => {
    const texts = [...(await numberTexts(Array.from({ length: 143 }, (_, i) => i * 7), ["canonical"])), ...ODD_LINES];
    const py = await runPython(CASES.map((o) => ({ op: "translate", model: MODEL_DIR, compute_type: "float32", texts, options: pythonOptions(o) })));
    const translator = await Translator.load(MODEL_DIR, { computeType: "float32" });
    for (const [k, options] of CASES.entries()) {
      const js = await translator.translateBatch(texts, { ...options, returnScores: true });
      const diff = await assertSameTranslations(js, py[k].results, texts, { model: MODEL_DIR, computeType: "float32",
        options: pythonOptions(options), label: JSON.stringify(options) });
      if (options.forcedBosId !== undefined) { // every number's hypotheses start with it (the odd lines may be blank)
        assert.ok(js.slice(0, 143).every((r) => r.tokenIds.every((ids) => ids[0] === options.forcedBosId)));
      }
      t.diagnostic(`${JSON.stringify(options)}: ${texts.length} inputs as Python's up to ties, max |score diff| ${diff.toExponential(2)}`);
    }
    await translator.release();
  });
});

test("transformersDone and normalize32: transformers' stop heuristic in float32", () => {
  assert.equal(normalize32(-1, 3, 1), Math.fround(-1 / 3));
  assert.equal(transformersDone([-1, -2], -5, 3, 10, 1, true), true); // earlyStopping true: K finished is enough
  assert.equal(transformersDone([-1, -2], -6, 3, 10, 1, false), true); // -6 / 3 = -2 is not above the worst: stop
  assert.equal(transformersDone([-1, -2.5], -6, 3, 10, 1, false), false); // -2 > -2.5: go on
  assert.equal(transformersDone([-1, -2.5], -6, 3, 10, 1, "never"), false); // "never": -6 / 10 = -0.6 > -2.5
  assert.equal(transformersDone([-0.5, -0.55], -6, 3, 10, 1, "never"), true); // -0.6 is not above -0.55
  assert.equal(transformersDone([-0.5, -0.55], -6, 3, 10, -1, "never"), true); // lp <= 0: the current length
});

test("forced tokens and renormalize edit the rows as transformers' processors do", () => {
  const lp = Float32Array.from([-1, -2, -3, -0.5, -0.25, -4]);
  forceToken(2, [0, 1])(lp, 3, [[], []], [0, 1], 0); // sentence 0 at its step 0; sentence 1 waits for step 1
  assert.deepEqual([...lp], [-Infinity, -Infinity, 0, -0.5, -0.25, -4]);
  const row = Float32Array.from([Math.log(0.25), -Infinity, Math.log(0.25), -Infinity, -Infinity, -Infinity]);
  renormalize(row, 3);
  assert.ok(Math.abs(row[0] - Math.log(0.5)) < 1e-6 && Math.abs(row[2] - Math.log(0.5)) < 1e-6 && row[1] === -Infinity);
  assert.ok(row.subarray(3).every((v) => v === -Infinity)); // a row of -inf stays so
  assert.throws(() => decodingOptions({ earlyStopping: true }), /earlyStopping applies to beamRules='transformers' only/);
  assert.throws(() => decodingOptions({ beamRules: "hf" }), /beamRules must be one of 'seq2onnx', 'transformers', got "hf"/);
  assert.throws(() => decodingOptions({ suppressIds: [1, -1] }), /suppressIds must hold ids \(int >= 0\), got -1/);
});
