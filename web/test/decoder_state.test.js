// DecoderState (src/decoder_state.js) on the shipped model (format 4, decoder step contract 3): rows that join a batch
// after it stepped (extend) and rows that leave or reorder (keep) get, row for row, what each row gets decoded alone.
// The batch and the lone runs are the same graph on other batch shapes (rows beside it, a source padded to a longer
// one), so their sums may round in other orders: each log-prob within tests/agreement.py's float32 bound for the
// package's decoder step (python_reference.py "bounds"), never a figure measured here.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { DecoderState } from "../src/decoder_state.js";
import { padSources } from "../src/decoding.js";
import { Translator } from "../src/index.js";
import { EARLIER_CONTRACT, MODEL_DIR, runPython } from "./python.js";

// three sources of unequal lengths (ids ending with EOS 2): B, shorter than A, joins at step 1 (its mask and cross K/V
// padded); C, longer than both, at step 2 (A's and B's padded)
const A = [17, 45, 9, 130, 2], B = [64, 2], C = [8, 99, 150, 23, 71, 40, 12, 5, 2];
const FED = { A: [21, 37], B: [52, 6], C: [14] }; // each row's tokens after its BOS (any ids: teacher-forced)

const encode = (engine, config, sources) => DecoderState.encode(engine, ...padSources(sources, config.pad_id));
const ids = (list) => BigInt64Array.from(list, BigInt);
const row = (logProbs, r, vocab) => logProbs.subarray(r * vocab, (r + 1) * vocab);

/** The source decoded alone, BOS then `fed`: its log-probs [V] at each step. */
async function alone(engine, config, source, fed) {
  const state = await encode(engine, config, [source]);
  const out = [];
  for (const token of [config.bos_id, ...fed]) out.push((await state.step(ids([token])))[0].slice());
  return out;
}

function maxDiff(a, b) {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}

test("extend and keep: rows at their own positions give what each row gives alone (the shipped model, format 4)", async (t) => {
  const [{ log_prob: bound }] = await runPython([{ op: "bounds", model: MODEL_DIR, compute_type: "float32" }]);
  const translator = await Translator.load(MODEL_DIR, { computeType: "float32", intraThreads: 1 });
  const { engine, config } = translator, V = config.vocab_size, bos = config.bos_id;
  assert.equal(engine.rowsAtOwnPositions, true);
  const want = { A: await alone(engine, config, A, FED.A), B: await alone(engine, config, B, FED.B),
    C: await alone(engine, config, C, FED.C) };

  const got = { A: [], B: [], C: [] };
  const state = await encode(engine, config, [A]);
  let [lp] = await state.step(ids([bos])); // A at 0
  got.A.push(row(lp, 0, V).slice());
  state.extend(await encode(engine, config, [B]));
  assert.deepEqual([...state.past.lengths], [1n, 0n]);
  [lp] = await state.step(ids([FED.A[0], bos])); // A at 1, B at 0
  got.A.push(row(lp, 0, V).slice());
  got.B.push(row(lp, 1, V).slice());
  state.extend(await encode(engine, config, [C]));
  assert.deepEqual(state.encoderMask.dims, [3, C.length]);
  [lp] = await state.step(ids([FED.A[1], FED.B[0], bos])); // A at 2, B at 1, C at 0
  got.A.push(row(lp, 0, V).slice());
  got.B.push(row(lp, 1, V).slice());
  got.C.push(row(lp, 2, V).slice());
  state.keep([2, 1]); // A leaves, C and B swap: the cache, lengths, cross K/V and mask follow their rows
  assert.deepEqual([...state.past.lengths], [1n, 2n]);
  [lp] = await state.step(ids([FED.C[0], FED.B[1]])); // C at 1, B at 2
  got.C.push(row(lp, 0, V).slice());
  got.B.push(row(lp, 1, V).slice());

  let largest = 0;
  for (const name of ["A", "B", "C"]) {
    assert.equal(got[name].length, want[name].length);
    got[name].forEach((lps, step) => {
      const d = maxDiff(lps, want[name][step]);
      largest = Math.max(largest, d);
      assert.ok(d <= bound, `row ${name} step ${step}: |log-prob diff| ${d} > the float32 bound ${bound}`);
    });
  }
  // the bound tells rows apart: a row at another position or over another source is far outside it
  // the bound tells rows apart: another source's log-probs at the same position lie far outside it (feeding every row
  // one past_length, as before contract 3, puts B's first step 3.3 away: checked by hand)
  assert.ok(maxDiff(want.B[0], want.A[0]) > 100 * bound && maxDiff(want.C[0], want.A[0]) > 100 * bound);
  await translator.release();
  t.diagnostic(`max |log-prob diff| ${largest.toExponential(2)} (bound ${bound.toExponential(2)})`);
});

test("keep with cross K/V per sentence (group 2): rows leave by sentence, beams reorder within one", async () => {
  const [{ log_prob: bound }] = await runPython([{ op: "bounds", model: MODEL_DIR, compute_type: "float32" }]);
  const translator = await Translator.load(MODEL_DIR, { computeType: "float32", intraThreads: 1 });
  const { engine, config } = translator, V = config.vocab_size, bos = config.bos_id;
  assert.equal(engine.crossPerSentence, true);
  const state = await DecoderState.encode(engine, ...padSources([A, C], config.pad_id), null, 2); // rows A A C C
  assert.equal(state.rows, 4);
  await state.step(ids([bos, bos, bos, bos]));
  state.keep([2, 3]); // A's rows leave: its cross row with them
  assert.deepEqual(state.encoderMask.dims, [1, C.length]);
  let [lp] = await state.step(ids([14, 77])); // two beams of C
  const got = [row(lp, 0, V).slice(), row(lp, 1, V).slice()];
  state.keep([1, 1]); // both continue beam 1: the cache only
  [lp] = await state.step(ids([5, 9]));
  got.push(row(lp, 0, V).slice(), row(lp, 1, V).slice());
  const want = [await alone(engine, config, C, [14]), await alone(engine, config, C, [77, 5]), await alone(engine, config, C, [77, 9])];
  await translator.release();
  const pairs = [[got[0], want[0][1]], [got[1], want[1][1]], [got[2], want[1][2]], [got[3], want[2][2]]];
  pairs.forEach(([g, w], i) => {
    const d = maxDiff(g, w);
    assert.ok(d <= bound, `pair ${i}: |log-prob diff| ${d} > the float32 bound ${bound}`);
  });
});

test("a decoder step of one position for all rows (format 1): rows join before the first step only", async () => {
  const [{ log_prob: bound }] = await runPython([{ op: "bounds", model: EARLIER_CONTRACT, compute_type: "float32" }]);
  const translator = await Translator.load(EARLIER_CONTRACT, { computeType: "float32", intraThreads: 1 });
  const { engine, config } = translator, V = config.vocab_size, bos = config.bos_id;
  assert.equal(engine.rowsAtOwnPositions, false);
  const stepped = await encode(engine, config, [A]);
  await stepped.step(ids([bos]));
  const newcomer = await encode(engine, config, [B]);
  assert.throws(() => stepped.extend(newcomer), /^RangeError: this decoder step takes one position for all rows .*: rows cannot join a batch that has stepped$/);
  const state = await encode(engine, config, [A]);
  state.extend(newcomer); // not stepped yet: every row at position 0
  const [lp] = await state.step(ids([bos, bos]));
  const want = [await alone(engine, config, A, []), await alone(engine, config, B, [])];
  await translator.release();
  for (const r of [0, 1]) assert.ok(maxDiff(row(lp, r, V), want[r][0]) <= bound, `row ${r}`);
});

test("decoderPathFor names the graph that steps that many rows: the int8 few-rows step's file up to its max_rows", async () => {
  // a package exported with --few-rows (the shipped one has none: the export's default since issue #35)
  const work = mkdtempSync(path.join(tmpdir(), "few-rows-"));
  after(() => rmSync(work, { recursive: true, force: true }));
  const [{ path: dir }] = await runPython([{ op: "export_random", out: path.join(work, "model"), decoder_format: 3, few_rows: true }]);
  const translator = await Translator.load(dir, { computeType: "int8", intraThreads: 1, onWarning: () => {} });
  const { engine } = translator;
  assert.ok(engine.fewRows !== null, "the int8 variant has a few-rows step this onnxruntime runs");
  const max = engine.fewRows.maxRows;
  assert.match(engine.decoderPathFor(max), /decoder_step\.int8\.few_rows\.onnx/);
  assert.match(engine.decoderPathFor(max + 1), /decoder_step\.int8\.onnx/);
  assert.doesNotMatch(engine.decoderPathFor(max + 1), /few_rows/);
  await translator.release();
});
