// The parts of src/decoding.js and logit_filters.js on their own (the equality tests run them whole against Python).
import assert from "node:assert/strict";
import { test } from "node:test";
import { beamDone, commonPrefix, normalize, rank, Hypothesis, topCandidates, stepLimits } from "../src/decoding.js";
import { forcePrefix, noRepeatNgram, repetitionPenalty } from "../src/logit_filters.js";
import { decodingOptions } from "../src/options.js";
import { Random } from "../src/random.js";

/** The first m of a stable descending sort, NaN last (numpy's argsort of -x, kind="stable"). */
function reference(scores, m) {
  const nan = (v) => (Number.isNaN(v) ? 1 : 0);
  const order = (a, b) => nan(scores[a]) - nan(scores[b]) || (scores[a] < scores[b] ? 1 : scores[a] > scores[b] ? -1 : 0) || a - b;
  return [...scores.keys()].sort(order).slice(0, m);
}

test("topCandidates is the first m of a stable descending sort: ties to the lower index, NaN last", () => {
  const random = new Random([7]);
  const values = [0, -1, -2, -Infinity, Number.NaN, 3];
  for (let trial = 0; trial < 500; trial++) {
    const n = 1 + Math.floor(random.random() * 40), m = 1 + Math.floor(random.random() * 10);
    const scores = Float32Array.from({ length: n }, () => (random.random() < 0.6 ? values[Math.floor(random.random() * values.length)] : random.random()));
    assert.deepEqual(topCandidates(scores, 0, n, m), reference([...scores], m), `${[...scores]} m=${m}`);
  }
  const row = Float32Array.from([9, 1, 2, 2, 5, 2]); // an offset into a longer array
  assert.deepEqual(topCandidates(row, 1, 5, 3), [3, 1, 2]);
});

test("beamDone: K finished and the num_hypotheses-th best at least the best live beam", () => {
  assert.equal(beamDone([-1, -2], 3, 1, -5), false); // fewer than K finished
  assert.equal(beamDone([-1, -2, -3], 3, 1, -1), true); // the best finished ties the best live beam
  assert.equal(beamDone([-1, -2, -3], 3, 1, -0.5), false);
  assert.equal(beamDone([-1, -2, -3], 3, 2, -1.5), false); // the 2nd best (-2) is below the live beam
  assert.equal(beamDone([-3, -1, -2], 3, 2, -2), true);
  assert.equal(beamDone([-3, -1, -2], 3, 3, -Infinity), true); // no live beam
});

test("rank: best normalized first, earlier-finished first on ties; the empty hypothesis when none", () => {
  const h = (id, s) => new Hypothesis([id], s, s);
  assert.deepEqual(rank([h(1, -2), h(2, -1), h(3, -2), h(4, -1)], 3).map((x) => x.tokens[0]), [2, 4, 1]);
  assert.deepEqual(rank([], 2), [new Hypothesis([], 0, 0, false)]);
  assert.equal(normalize(-6, 3, 1), -2);
  assert.equal(normalize(-6, 0, 1), -6);
  assert.equal(normalize(-6, 4, 0.5), -3);
});

test("stepLimits: min of maxDecodingLength, a x srcLen + b and max_positions", () => {
  const config = { max_positions: 20 };
  const sources = [[1, 2], [1, 2, 3, 4, 5, 6, 7, 8]];
  assert.deepEqual(stepLimits(sources, decodingOptions({}), config), [16, 20]);
  assert.deepEqual(stepLimits(sources, decodingOptions({ maxLengthA: 0.5, maxLengthB: 1 }), config), [2, 5]);
  assert.deepEqual(stepLimits(sources, decodingOptions({ maxLengthA: 0, maxLengthB: null, maxDecodingLength: 7 }), config), [7, 7]);
  assert.deepEqual(stepLimits(sources, decodingOptions({ maxLengthA: 0, maxLengthB: 0 }), config), [0, 0]);
});

test("filters: repetition penalty once per token in float32, no-repeat n-grams, forced prefix", () => {
  const logProbs = Float32Array.from([-1, -2, -3, -4, -0.5, -0.25, -0.125, -8]);
  repetitionPenalty(1.1)(logProbs, 4, [[1, 1], [3]], [0, 1], 2);
  assert.deepEqual([...logProbs], [-1, Math.fround(-2 * Math.fround(1.1)), -3, -4, -0.5, -0.25, -0.125, Math.fround(-8 * Math.fround(1.1))]);
  const lp = new Float32Array(2 * 5);
  noRepeatNgram(2)(lp, 5, [[1, 2, 1], [3, 3, 4]], [0, 1], 3); // row 0 ends with 1 after "1 2": 2 is forbidden
  assert.deepEqual([...lp].map((v) => v === -Infinity), [false, false, true, false, false, false, false, false, false, false]);
  const forced = Float32Array.from([-1, -2, -3, -4, -5, -6]);
  forcePrefix([[2], []])(forced, 3, [[], []], [0, 1], 0);
  assert.deepEqual([...forced], [-Infinity, -Infinity, -3, -4, -5, -6]);
});

test("commonPrefix and the seeded generator", () => {
  assert.deepEqual(commonPrefix([[1, 2, 3], [1, 2], [1, 2, 4]]), [1, 2]);
  assert.deepEqual(commonPrefix([]), []);
  const a = new Random([1, 2, 3]), b = new Random([1, 2, 3]), c = new Random([1, 2, 4]);
  const draws = (r) => Array.from({ length: 5 }, () => r.random());
  const x = draws(a);
  assert.deepEqual(x, draws(b));
  assert.notDeepEqual(x, draws(c));
  assert.ok(x.every((v) => v >= 0 && v < 1));
});
