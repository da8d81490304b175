// Logit filters (runtime/logit_filters.py): each edits a step's log-probs in place before the next token is
// chosen. A filter is called as f(logProbs, vocab, tokens, rowExample, step):
//   logProbs    Float32Array [R * V]  the decoder's log-softmax for the R active rows
//   tokens      R arrays              what each row generated so far (forced prefix included)
//   rowExample  R ints                the sentence each row belongs to
//   step        int                   0 for the first generated token
// Scores are sums of the filtered log-probs (the penalties count; the sampling temperature, top-k and top-p
// only shape the sampling distribution, see decoding.js Sampler).

/** PAD and BOS are never generated. */
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

/** Force each sentence's target prefix: during its first prefix.length steps only the prefix token keeps its
 * log-prob (which counts in the score); every other token gets -inf. */
export function forcePrefix(prefixes) {
  return (logProbs, vocab, tokens, rowExample, step) => {
    rowExample.forEach((example, r) => {
      const prefix = prefixes[example];
      if (step >= prefix.length) return;
      const forced = prefix[step];
      const keep = logProbs[r * vocab + forced];
      logProbs.fill(-Infinity, r * vocab, (r + 1) * vocab);
      logProbs[r * vocab + forced] = keep;
    });
  };
}

/** The filters the options ask for, in the order they apply (the prefix overrides the rest). */
export function buildFilters(options, config, prefixes = null) {
  const filters = [suppressTokens([config.pad_id, config.bos_id])];
  if (options.minDecodingLength > 0) filters.push(suppressEosBeforeMin(config.eos_id, options.minDecodingLength));
  if (options.repetitionPenalty !== 1.0) filters.push(repetitionPenalty(options.repetitionPenalty));
  if (options.noRepeatNgramSize > 0) filters.push(noRepeatNgram(options.noRepeatNgramSize));
  if (prefixes !== null && prefixes.some((p) => p.length)) filters.push(forcePrefix(prefixes));
  return filters;
}
