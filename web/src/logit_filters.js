// Logit filters (runtime/decode/logit_filters.py): each edits a step's log-probs in place before the next token is
// chosen. A filter is called as f(logProbs, vocab, tokens, rowExample, step):
//   logProbs    Float32Array [R * V]  the decoder's log-softmax for the R active rows
//   tokens      R arrays              what each row generated so far (forced prefix included)
//   rowExample  R ints                the sentence each row belongs to
//   step        int                   0 for the first generated token
// Scores are sums of the filtered log-probs (the penalties count; the sampling temperature, top-k and top-p
// only shape the sampling distribution, see decoding.js Sampler).

/** These ids are never generated (options.suppressIds; by default PAD and BOS). */
export function suppressTokens(tokenIds) {
  return (logProbs, vocab) => {
    for (let r = 0; r < logProbs.length / vocab; r++) for (const t of tokenIds) logProbs[r * vocab + t] = -Infinity;
  };
}

/** EOS is forbidden while fewer than `minLength` tokens have been generated. */
export function suppressEosBeforeMin(eosId, minLength) {
  return (logProbs, vocab, tokens, rowExample, step) => {
    if (step >= minLength) return;
    for (let r = 0; r < logProbs.length / vocab; r++) logProbs[r * vocab + eosId] = -Infinity;
  };
}

/** CTRL's penalty (Keskar et al., 2019) on log-probs: an already generated token's log-prob (<= 0) is multiplied
 * by `penalty` (in float32, as numpy does), once however often it was generated. */
export function repetitionPenalty(penalty) {
  const p = Math.fround(penalty);
  return (logProbs, vocab, tokens) => {
    tokens.forEach((row, r) => {
      for (const t of new Set(row)) logProbs[r * vocab + t] *= p;
    });
  };
}

/** Forbid the token that would repeat an n-gram already in the row (fairseq's no_repeat_ngram_size). */
export function noRepeatNgram(n) {
  return (logProbs, vocab, tokens) => {
    tokens.forEach((row, r) => {
      const t = row.length;
      if (t < n) return;
      for (let start = 0; start + n <= t; start++) {
        let match = true;
        for (let j = 0; j < n - 1 && match; j++) match = row[start + j] === row[t - n + 1 + j];
        if (match) logProbs[r * vocab + row[start + n - 1]] = -Infinity;
      }
    });
  };
}

/** transformers' ForcedBOSTokenLogitsProcessor and ForcedEOSTokenLogitsProcessor: at a sentence's step
 * steps[sentence] only `token` may come, with log-prob 0 (it counts in the length, not in the score). */
export function forceToken(token, steps) {
  return (logProbs, vocab, tokens, rowExample, step) => {
    rowExample.forEach((example, r) => {
      if (steps[example] !== step) return;
      logProbs.fill(-Infinity, r * vocab, (r + 1) * vocab);
      logProbs[r * vocab + token] = 0;
    });
  };
}

/** Log-softmax again after the other filters (transformers' renormalize_logits), in float32 as numpy computes it
 * (runtime/decode/logit_filters.py renormalize). A row whose filters forbid every token stays all -inf. */
export function renormalize(logProbs, vocab) {
  for (let r = 0; r < logProbs.length / vocab; r++) {
    const row = logProbs.subarray(r * vocab, (r + 1) * vocab);
    let best = -Infinity;
    for (const v of row) if (v > best) best = v;
    if (!Number.isFinite(best)) continue;
    const shifted = Float32Array.from(row, (v) => v - best);
    let sum = 0; // numpy's float32 sum is pairwise; a float64 sum rounded once lies within its rounding
    for (const v of shifted) sum += Math.fround(Math.exp(v));
    const logSum = Math.fround(Math.log(Math.fround(sum)));
    for (let t = 0; t < vocab; t++) row[t] = shifted[t] - logSum;
  }
}

/** Force each sentence's target prefix: during its first prefix.length steps (after `start` steps: a forced BOS
 * comes first) only the prefix token keeps its log-prob (which counts in the score); every other token gets -inf. */
export function forcePrefix(prefixes, start = 0) {
  return (logProbs, vocab, tokens, rowExample, step) => {
    const at = step - start;
    if (at < 0) return;
    rowExample.forEach((example, r) => {
      const prefix = prefixes[example];
      if (at >= prefix.length) return;
      const forced = prefix[at];
      const keep = logProbs[r * vocab + forced];
      logProbs.fill(-Infinity, r * vocab, (r + 1) * vocab);
      logProbs[r * vocab + forced] = keep;
    });
  };
}

/** The filters the options ask for, in the order they apply (runtime/decode/logit_filters.py build_filters says why).
 * limits: each sentence's step limit (forcedEos needs it). */
export function buildFilters(options, config, prefixes = null, limits = null) {
  const vocab = config.vocab_size;
  const suppress = options.suppressIds === null ? [config.pad_id, config.bos_id] : options.suppressIds;
  for (const [name, ids] of [["suppressIds", suppress], ["forcedBosId", [options.forcedBosId ?? 0]]]) {
    const bad = ids.find((x) => x >= vocab);
    if (bad !== undefined) throw new RangeError(`${name} holds an id outside the vocabulary [0, ${vocab}): ${bad}`);
  }
  const filters = suppress.length ? [suppressTokens(suppress)] : [];
  if (options.minDecodingLength > 0) filters.push(suppressEosBeforeMin(config.eos_id, options.minDecodingLength));
  if (options.repetitionPenalty !== 1.0) filters.push(repetitionPenalty(options.repetitionPenalty));
  if (options.noRepeatNgramSize > 0) filters.push(noRepeatNgram(options.noRepeatNgramSize));
  const n = limits !== null ? limits.length : prefixes !== null ? prefixes.length : 1;
  if (options.forcedBosId !== null) filters.push(forceToken(options.forcedBosId, new Array(n).fill(0)));
  if (options.forcedEos) {
    if (limits === null) throw new Error("forcedEos needs the sentences' step limits");
    filters.push(forceToken(config.eos_id, limits.map((l) => l - 1)));
  }
  if (prefixes !== null && prefixes.some((p) => p.length)) filters.push(forcePrefix(prefixes, options.forcedBosId !== null ? 1 : 0));
  if (options.renormalize) filters.push(renormalize);
  return filters;
}
