// How the equality tests compare the JS runtime's translations with the Python runtime's.
import assert from "node:assert/strict";

/** JS results ({hypotheses, tokenIds, scores, normalizedScores, finished, truncated, attention}) against Python's
 * (test/python_reference.py "translate"): every hypothesis's ids and text equal, in the same order, with the same
 * finished and truncated flags; scores and normalized scores within `tolerance`; where Python returned attention
 * (return_attention), the same [target tokens][source tokens + EOS] shape and every weight within `tolerance`. idsOf: which hypotheses must
 * have equal ids ("all", or "best": the first only). Returns the largest score difference. */
export function assertSameTranslations(js, py, texts, { tolerance = 1e-4, label = "", idsOf = "all" } = {}) {
  assert.equal(js.length, py.length, `${label}: ${js.length} JS results for ${py.length} Python results`);
  let maxDiff = 0;
  js.forEach((r, i) => {
    const p = py[i], where = `${label}: input ${i} ${JSON.stringify(texts[i])}`;
    const n = idsOf === "best" ? 1 : p.token_ids.length;
    assert.deepEqual(r.tokenIds.slice(0, n), p.token_ids.slice(0, n), `${where}: token ids differ`);
    assert.deepEqual(r.hypotheses.slice(0, n), p.hypotheses.slice(0, n), `${where}: texts differ`);
    assert.equal(r.tokenIds.length, p.token_ids.length, `${where}: number of hypotheses differs`);
    assert.deepEqual(r.finished.slice(0, n), p.finished.slice(0, n), `${where}: finished differs`);
    assert.equal(r.truncated, p.truncated, `${where}: truncated differs`);
    assert.equal(r.sourceUnknownTokens, p.source_unknown_tokens, `${where}: sourceUnknownTokens differs`);
    for (const [a, b] of [[r.scores, p.scores], [r.normalizedScores, p.normalized_scores]]) {
      for (let j = 0; j < n; j++) {
        const d = Math.abs(a[j] - b[j]);
        assert.ok(d <= tolerance, `${where}: hypothesis ${j} score ${a[j]} vs Python ${b[j]} (|diff| ${d} > ${tolerance})`);
        maxDiff = Math.max(maxDiff, d);
      }
    }
    assert.equal(r.attention === null || r.attention === undefined, p.attention === null || p.attention === undefined,
      `${where}: attention returned on one side only`);
    for (let j = 0; p.attention && j < n; j++) {
      const [a, b] = [r.attention[j], p.attention[j]];
      assert.deepEqual(a.map((row) => row.length), b.map((row) => row.length), `${where}: hypothesis ${j} attention shape differs`);
      a.forEach((row, t) => row.forEach((w, s) => {
        const d = Math.abs(w - b[t][s]);
        assert.ok(d <= tolerance, `${where}: hypothesis ${j} attention [${t}][${s}] ${w} vs Python ${b[t][s]} (|diff| ${d})`);
      }));
    }
  });
  return maxDiff;
}
