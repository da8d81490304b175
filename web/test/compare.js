// How the equality tests compare the JS runtime's translations with the Python runtime's.
import assert from "node:assert/strict";
import { runPython } from "./python.js";

const ATTENTION_TOLERANCE = 1e-4;

/** {tokenIds, scores, normalizedScores, finished} -> Python's key names, for python_reference.py's "compare". */
const asPython = (r) => ({ token_ids: r.tokenIds, scores: r.scores, normalized_scores: r.normalizedScores, finished: r.finished });

/** JS results ({hypotheses, tokenIds, scores, normalizedScores, finished, truncated, attention}) against Python's
 * (test/python_reference.py "translate" of the same `texts` with `options` in Python's names, on the package `model`
 * at `computeType`). Node, the browser's WASM and the Python wheel run onnxruntime kernels that round differently,
 * so equal ids and scores are not required here by a figure picked by eye: python_reference.py's "compare" applies
 * tests/agreement.py's rule (one place): hypothesis for hypothesis, equal ids with scores within the bound derived
 * from the package's weights (int8: plus its quantization step), or else a tie, judged by the Python runtime
 * teacher-forced. Here, where the ids agree: the same text and finished flag; per result the same truncated flag and
 * sourceUnknownTokens; where Python returned attention, the same shape and each weight within ATTENTION_TOLERANCE
 * (a weight differs where its log-weight does, by far less than the log-prob bound).
 * Returns the largest score difference where the ids agree. */
export async function assertSameTranslations(js, py, texts, { model, computeType, options = {}, label = "" }) {
  assert.equal(js.length, py.length, `${label}: ${js.length} JS results for ${py.length} Python results`);
  const [verdict] = await runPython([{ op: "compare", model, compute_type: computeType, texts, options,
    js: js.map(asPython), python: py }]);
  assert.equal(verdict.error, null, `${label}: ${verdict.error}`);
  js.forEach((r, i) => {
    const p = py[i], where = `${label}: input ${i} ${JSON.stringify(texts[i])}`;
    assert.equal(r.tokenIds.length, p.token_ids.length, `${where}: number of hypotheses differs`);
    assert.equal(r.truncated, p.truncated, `${where}: truncated differs`);
    assert.equal(r.sourceUnknownTokens, p.source_unknown_tokens, `${where}: sourceUnknownTokens differs`);
    assert.equal(r.attention === null || r.attention === undefined, p.attention === null || p.attention === undefined,
      `${where}: attention returned on one side only`);
    p.token_ids.forEach((ids, j) => {
      if (JSON.stringify(ids) !== JSON.stringify(r.tokenIds[j])) return; // a tie, judged above
      assert.equal(r.hypotheses[j], p.hypotheses[j], `${where}: hypothesis ${j}: the same ids, other texts`);
      assert.equal(r.finished[j], p.finished[j], `${where}: hypothesis ${j}: finished differs`);
      if (!p.attention) return;
      const [a, b] = [r.attention[j], p.attention[j]];
      assert.deepEqual(a.map((row) => row.length), b.map((row) => row.length), `${where}: hypothesis ${j} attention shape differs`);
      a.forEach((row, t) => row.forEach((w, s) => {
        const d = Math.abs(w - b[t][s]);
        assert.ok(d <= ATTENTION_TOLERANCE, `${where}: hypothesis ${j} attention [${t}][${s}] ${w} vs Python ${b[t][s]} (|diff| ${d})`);
      }));
    });
  });
  return verdict.max_diff;
}
