// The decoding loop: encode once, then one decoder step per generated token. A port of runtime/decode/decoding.py and search.py,
// rule for rule, so that the JS and Python runtimes give the same tokens (the tests compare them):
//   * logit filters (logit_filters.js) edit the step's log-probs in place: suppressed ids (PAD/BOS by default), EOS
//     before the minimum length, repetition penalty, no-repeat-ngram, forced BOS and EOS, forced target prefix,
//     renormalization;
//   * a search turns log-probs into the next tokens: RowSearch (greedy argmax, lowest id on ties, or sampling;
//     one row per hypothesis) or BeamSearch (fairseq-style);
//   * a ranker sorts finished hypotheses by score / length ** lengthPenalty.
// Semantics (training/reference.py, token for token):
//   * at most `limit` steps per sentence (stepLimits: maxDecodingLength, maxLengthA * srcLen + maxLengthB, and
//     max_positions); a step appends one token, EOS included;
//   * PAD and BOS are never generated; EOS is forbidden while fewer than minDecodingLength tokens were
//     generated; score = sum of the log-probs of the generated tokens (EOS included): float64 for RowSearch,
//     float32 for the beams' cumulative scores, as numpy computes them in Python;
//   * beam search ranks the K*V candidates, takes the best 2K (ties to the lower flat index beam * V + token),
//     finishes EOS candidates among the best K, continues the first K non-EOS; a sentence stops when `beamDone`
//     says so, or after its `limit` steps (its live beams finished as they are, without EOS);
//   * beamRules "transformers" (search.py's docstring): the finished set keeps the best K, at the limit's step the
//     best K candidates finish, and a full sentence stops by `transformersDone` (earlyStopping).
// Rows: the engine works on the rows of the active sentences; a sentence that stops leaves them at once. The decoder's
// state between steps (the cache, the cross K/V and mask) is a DecoderState (decoder_state.js): stepped, then keep(the
// parents of the rows that go on). With engine.crossPerSentence, beam search keeps one cross K/V and mask row per
// sentence, shared by its K beams (row = sentence * K + beam); otherwise they are copied to every row.
import { DecoderState } from "./decoder_state.js";
import { ModelPackageError } from "./errors.js";
import { buildFilters } from "./logit_filters.js";
import { crc32OfIds, Random } from "./random.js";

/** generated ids (without EOS), score (sum of log-probs, EOS included when generated), normalizedScore (the
 * ranking score), finished (ended with EOS; false: stopped by the length limit or by filters forbidding all),
 * attention (returnAttention: one Float32Array row over the source ids per token, else null) */
export class Hypothesis {
  constructor(tokens, score, normalizedScore, finished = true, attention = null) {
    Object.assign(this, { tokens, score, normalizedScore, finished, attention });
  }
}

class NonFiniteScores extends Error {}

/** The error for a step of `rows` rows whose log-probs hold NaN or +inf, naming the graph that ran it (the few-rows
 * step's file for few rows: engine.decoderPathFor). */
function brokenGraph(engine, rows) {
  return new ModelPackageError(`${engine.decoderPathFor(rows)} returned NaN or infinite log-probs: ` +
    "the model package is broken; re-export the model");
}

// --- ranking --------------------------------------------------------------------------------------
/** score / length ** lengthPenalty (score itself for length 0). */
export function normalize(score, length, lengthPenalty) {
  return length > 0 ? score / length ** lengthPenalty : score;
}

/** When beam search stops a sentence (runtime/decode/search.py beam_done, where the rule and its reasons are written):
 * once `beamSize` hypotheses have finished AND the `numHypotheses`-th best finished normalized score is at least
 * the best live beam's normalized score now (`bestLive`, -inf when no beam is alive). */
export function beamDone(finished, beamSize, numHypotheses, bestLive) {
  if (finished.length < beamSize) return false;
  return [...finished].sort((a, b) => b - a)[numHypotheses - 1] >= bestLive;
}

/** normalize as transformers computes it (beamRules "transformers"; runtime/decode/search.py normalize32): float32. */
export function normalize32(score, length, lengthPenalty) {
  return length > 0 ? Math.fround(Math.fround(score) / Math.fround(length ** lengthPenalty)) : score;
}

/** When transformers' beam search stops a sentence whose K finished slots are full (runtime/decode/search.py
 * transformers_done, where the rule is written): earlyStopping true at once; false: the best live raw score over
 * the current length ** lp is not above the worst finished; "never": over the limit's length when lp > 0. */
export function transformersDone(finished, bestLive, length, limit, lengthPenalty, earlyStopping) {
  if (earlyStopping === true) return true;
  const bestLength = earlyStopping === "never" && lengthPenalty > 0 ? limit : length;
  return !(normalize32(bestLive, bestLength, lengthPenalty) > Math.min(...finished));
}

/** Best n by normalized score; a stable sort keeps the earlier-finished first on ties. */
export function rank(hypotheses, n) {
  const hyps = [...hypotheses].sort((a, b) => (b.normalizedScore > a.normalizedScore ? 1 : b.normalizedScore < a.normalizedScore ? -1 : 0));
  return hyps.length ? hyps.slice(0, n) : [new Hypothesis([], 0.0, 0.0, false)];
}

/** Is (value a, index i) ranked before (b, j) in a stable descending sort? NaN ranks last, as in numpy. */
function before(a, i, b, j) {
  if (Number.isNaN(b)) return !Number.isNaN(a) || i < j;
  if (Number.isNaN(a)) return false;
  return a > b || (a === b && i < j);
}

/** Indices of the m best of scores[start, start + count), best first, ties to the lower index: exactly the
 * first m of a stable descending sort (runtime/decode/top_candidates.py). */
export function topCandidates(scores, start, count, m) {
  const idx = [], val = [];
  for (let c = 0; c < count; c++) {
    const v = scores[start + c];
    if (idx.length === m && !before(v, c, val[m - 1], idx[m - 1])) continue;
    let pos = Math.min(idx.length, m - 1);
    if (idx.length < m) {
      idx.push(c);
      val.push(v);
    }
    while (pos > 0 && before(v, c, val[pos - 1], idx[pos - 1])) {
      idx[pos] = idx[pos - 1];
      val[pos] = val[pos - 1];
      pos--;
    }
    idx[pos] = c;
    val[pos] = v;
  }
  return idx;
}

/** The longest common prefix of id lists. */
export function commonPrefix(seqs) {
  if (!seqs.length) return [];
  const first = seqs[0];
  let n = Math.min(...seqs.map((s) => s.length));
  for (const s of seqs.slice(1)) {
    let i = 0;
    while (i < n && s[i] === first[i]) i++;
    n = i;
  }
  return first.slice(0, n);
}

// --- token selection --------------------------------------------------------------------------------
/** Softmax of logits that may hold -inf (at least one finite). */
function softmax(x) {
  let max = -Infinity;
  for (const v of x) if (v > max) max = v;
  const z = x.map((v) => Math.exp(v - max));
  const sum = z.reduce((a, b) => a + b, 0);
  return z.map((v) => v / sum);
}

/** Random sampling with temperature, top-k and top-p (nucleus), one generator per row. Each row's generator
 * is seeded from (seed, the sentence's source ids, hypothesis index), so a sentence's samples do not depend on
 * the batch it is decoded in. seed null: fresh entropy. */
export class Sampler {
  constructor(options, sources, width) {
    this.topk = options.samplingTopk;
    this.topp = options.samplingTopp;
    this.temperature = options.samplingTemperature;
    this.generators = [];
    for (const src of sources) {
      const key = crc32OfIds(src);
      for (let j = 0; j < width; j++) {
        const seed = options.seed === null ? null : [options.seed % 2 ** 32, Math.floor(options.seed / 2 ** 32), key, j];
        this.generators.push(new Random(seed));
      }
    }
  }

  /** logProbs [R * V], rowIds (initial row of each active row) -> tokens [R] */
  choose(logProbs, vocab, rowIds) {
    return rowIds.map((rowId, r) => {
      const row = Array.from(logProbs.subarray(r * vocab, (r + 1) * vocab));
      if (this.temperature === 0) return argmax(row);
      let logits = row.map((v) => Math.fround(v / Math.fround(this.temperature)));
      if (this.topk > 1 && this.topk < vocab) {
        const kth = [...logits].sort((a, b) => b - a)[this.topk - 1]; // the k-th largest; ties kept
        logits = logits.map((v) => (v < kth ? -Infinity : v));
      }
      if (this.topp < 1.0) {
        const order = logits.map((_, i) => i).sort((a, b) => logits[b] - logits[a] || a - b);
        const probs = softmax(order.map((i) => logits[i]));
        let mass = 0; // of the better tokens; the best token is always kept
        order.forEach((i, j) => {
          if (mass >= this.topp) logits[i] = -Infinity;
          mass += probs[j];
        });
      }
      const probs = softmax(logits);
      const cdf = [];
      probs.reduce((acc, p, i) => (cdf[i] = acc + p), 0);
      const u = (1.0 - this.generators[rowId].random()) * cdf[vocab - 1]; // (0, total]
      let token = 0;
      while (token < vocab && cdf[token] < u) token++; // the first token with cdf >= u
      return Math.min(token, vocab - 1);
    });
  }
}

function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

// --- searches ---------------------------------------------------------------------------------------
/** The per-row attention history (an array of rows per row) with this step's rows (Float32Array [R*S]) appended
 * (runtime/decode/search.py extend_rows); null: not kept. */
export function extendRows(history, rows, nRows) {
  if (rows === null) return history;
  const s = rows.length / nRows;
  return Array.from({ length: nRows }, (_, r) => [...(history?.[r] ?? []), rows.slice(r * s, (r + 1) * s)]);
}

/** Greedy (argmax, lowest id on ties) or sampling: each row is one independent hypothesis. */
export class RowSearch {
  constructor(nExamples, width, limits, eos, lengthPenalty, sampler = null) {
    Object.assign(this, { width, eos, lengthPenalty, sampler, limits });
    this.rowIds = Array.from({ length: nExamples * width }, (_, i) => i); // initial row of each active row
    this.rowExample = this.rowIds.map((i) => Math.floor(i / width));
    this.tokens = this.rowIds.map(() => []);
    this.scores = this.rowIds.map(() => 0.0); // float64, as the reference
    this.attention = null; // [R][step] rows with returnAttention
    this.finished = Array.from({ length: nExamples }, () => []);
  }

  finish(r, length, ended, dropLast) {
    const score = this.scores[r];
    const tokens = dropLast ? this.tokens[r].slice(0, -1) : this.tokens[r].slice();
    const attention = this.attention === null ? null : this.attention[r].slice(0, tokens.length);
    this.finished[this.rowExample[r]].push(new Hypothesis(tokens, score, normalize(score, length, this.lengthPenalty), ended, attention));
  }

  /** Pick each row's next token; return the parents (current rows that go on). attention (Float32Array [R*S] or
   * null): this step's cross-attention rows, kept with the tokens they chose. */
  advance(logProbs, vocab, step, attention = null) {
    const rows = this.rowIds.length;
    const stuck = [];
    for (let r = 0; r < rows; r++) {
      let best = -Infinity, nan = false;
      for (let t = r * vocab; t < (r + 1) * vocab; t++) {
        const v = logProbs[t];
        if (Number.isNaN(v)) nan = true;
        else if (v > best) best = v;
      }
      if (nan || best === Infinity) throw new NonFiniteScores();
      // a row whose filters forbid every token ends here, unfinished, with the tokens it has
      stuck.push(best === -Infinity);
      if (best === -Infinity) logProbs[r * vocab + this.eos] = 0.0; // a placeholder pick, dropped below
    }
    const tokens = this.sampler === null
      ? this.rowIds.map((_, r) => argmax(logProbs.subarray(r * vocab, (r + 1) * vocab)))
      : this.sampler.choose(logProbs, vocab, this.rowIds);
    const ended = [], atLimit = [], parents = [];
    for (let r = 0; r < rows; r++) {
      this.scores[r] += logProbs[r * vocab + tokens[r]];
      this.tokens[r].push(tokens[r]);
      ended.push(tokens[r] === this.eos && !stuck[r]);
      atLimit.push(!ended[r] && !stuck[r] && step + 1 >= this.limits[this.rowExample[r]]);
    }
    this.attention = extendRows(this.attention, attention, rows);
    for (let r = 0; r < rows; r++) if (ended[r]) this.finish(r, step + 1, true, true);
    for (let r = 0; r < rows; r++) if (atLimit[r]) this.finish(r, step + 1, false, false);
    for (let r = 0; r < rows; r++) if (stuck[r]) this.finish(r, step, false, true);
    for (let r = 0; r < rows; r++) if (!ended[r] && !atLimit[r] && !stuck[r]) parents.push(r);
    if (parents.length < rows) {
      this.rowIds = parents.map((r) => this.rowIds[r]);
      this.rowExample = parents.map((r) => this.rowExample[r]);
      this.tokens = parents.map((r) => this.tokens[r]);
      this.scores = parents.map((r) => this.scores[r]);
      if (this.attention !== null) this.attention = parents.map((r) => this.attention[r]);
    }
    return parents;
  }

  /** Every sequence the example's final answer may still extend (streaming). */
  candidates(example) {
    const live = this.tokens.filter((_, r) => this.rowExample[r] === example && Number.isFinite(this.scores[r]));
    return [...live, ...this.finished[example].map((h) => h.tokens)];
  }
}

/** fairseq-style beam search over [A sentences, K beams]. */
export class BeamSearch {
  constructor(nExamples, beamSize, limits, eos, lengthPenalty, numHypotheses = 1, rules = "seq2onnx", earlyStopping = false) {
    const k = beamSize;
    Object.assign(this, { k, eos, lengthPenalty, limits, n: numHypotheses, rules, earlyStopping });
    this.examples = Array.from({ length: nExamples }, (_, i) => i); // active sentences
    this.cum = new Float32Array(nExamples * k).fill(-Infinity); // [A, K] float32; the K beams start identical:
    for (let a = 0; a < nExamples; a++) this.cum[a * k] = 0.0; //  expand beam 0 only
    this.tokens = Array.from({ length: nExamples * k }, () => []); // [A*K] rows
    this.attention = null; // [A*K][step] rows with returnAttention
    this.finished = Array.from({ length: nExamples }, () => []);
    this.nFinished = new Array(nExamples).fill(0);
  }

  get rowExample() {
    return this.examples.flatMap((e) => new Array(this.k).fill(e));
  }

  add(a, tokens, score, length, ended, attention = null) {
    const example = this.examples[a];
    const finished = this.finished[example];
    const transformers = this.rules === "transformers"; // its float32 division; the finished set keeps the best K
    finished.push(new Hypothesis(tokens.slice(), score,
      (transformers ? normalize32 : normalize)(score, length, this.lengthPenalty), ended,
      attention === null ? null : attention.slice(0, tokens.length)));
    if (transformers && finished.length > this.k) { // stable: on ties the earlier-finished stays
      finished.sort((x, y) => (y.normalizedScore > x.normalizedScore ? 1 : y.normalizedScore < x.normalizedScore ? -1 : 0));
      finished.length = this.k;
    }
    this.nFinished[example] = transformers ? finished.length : this.nFinished[example] + 1;
  }

  /** logProbs [A*K * V] -> parents [A'*K]: the current row each next row continues. attention (Float32Array
   * [A*K*S] or null): this step's cross-attention rows, kept with the tokens they chose. */
  advance(logProbs, vocab, step, attention = null) {
    const { k } = this, nAct = this.examples.length, width = k * vocab;
    const before = this.attention; // the rows' history
    const history = extendRows(before, attention, nAct * k); // ... and this step's row
    const rowOf = (h, row) => (h === null ? null : h[row]);
    const cand = new Float32Array(nAct * width); // cum + log-prob, in float32
    for (let row = 0; row < nAct * k; row++) {
      const c = this.cum[row];
      for (let t = 0; t < vocab; t++) cand[row * vocab + t] = c + logProbs[row * vocab + t];
    }
    const beam = [], token = [], score = [];
    for (let a = 0; a < nAct; a++) {
      const order = topCandidates(cand, a * width, width, 2 * k);
      const s = order.map((j) => cand[a * width + j]);
      if (!s.every((v) => v < Infinity)) throw new NonFiniteScores(); // NaN or +inf among the best
      beam.push(order.map((j) => Math.floor(j / vocab)));
      token.push(order.map((j) => j % vocab));
      score.push(s);
    }
    // EOS among the best K with a finite score: a finished hypothesis (it leaves the beam); transformers' rules:
    // at the limit's step every one of the best K (its stopping criteria end them all)
    const transformers = this.rules === "transformers";
    const last = this.examples.map((e) => step + 1 >= this.limits[e]);
    for (let a = 0; a < nAct; a++) {
      for (let j = 0; j < Math.min(k, token[a].length); j++) {
        const eos = token[a][j] === this.eos;
        if ((eos || (transformers && last[a])) && score[a][j] > -Infinity) {
          const row = a * k + beam[a][j];
          const tokens = eos ? this.tokens[row] : [...this.tokens[row], token[a][j]];
          this.add(a, tokens, score[a][j], step + 1, eos, rowOf(history, row));
        }
      }
    }
    // the first K non-EOS candidates continue (at most K of the 2K are EOS: one per beam)
    const newCum = new Float32Array(nAct * k), parents = [], newTokens = [];
    for (let a = 0; a < nAct; a++) {
      let b = 0;
      for (let j = 0; j < token[a].length && b < k; j++) {
        if (token[a][j] === this.eos) continue;
        newCum[a * k + b] = score[a][j];
        parents.push(a * k + beam[a][j]);
        newTokens.push(token[a][j]);
        b++;
      }
    }
    // a sentence whose filters forbid every continuation ends here: its live beams, unfinished
    const stuck = [];
    for (let a = 0; a < nAct; a++) {
      const anyLive = newCum.subarray(a * k, (a + 1) * k).some((v) => v > -Infinity);
      stuck.push(!anyLive && this.nFinished[this.examples[a]] < k);
      if (stuck[a]) {
        for (let b = 0; b < k; b++) if (this.cum[a * k + b] > -Infinity) this.add(a, this.tokens[a * k + b], this.cum[a * k + b], step, false, rowOf(before, a * k + b));
      }
    }
    this.tokens = parents.map((p, i) => [...this.tokens[p], newTokens[i]]);
    this.attention = history === null ? null : parents.map((p) => history[p]);
    const done = stuck.slice();
    for (let a = 0; a < nAct; a++) {
      if (stuck[a] || this.nFinished[this.examples[a]] < k) continue;
      const best = Math.max(...newCum.subarray(a * k, (a + 1) * k));
      const finished = this.finished[this.examples[a]].map((h) => h.normalizedScore);
      done[a] = transformers
        ? transformersDone(finished, best, step + 1, this.limits[this.examples[a]], this.lengthPenalty, this.earlyStopping)
        : beamDone(finished, k, this.n, normalize(best, step + 1, this.lengthPenalty));
    }
    const stay = [];
    for (let a = 0; a < nAct; a++) {
      if (transformers && last[a]) done[a] = true; // its best K have finished above
      const atLimit = !done[a] && last[a];
      if (atLimit) { // live beams end without EOS
        for (let b = 0; b < k; b++) if (newCum[a * k + b] > -Infinity) {
          this.add(a, this.tokens[a * k + b], newCum[a * k + b], step + 1, false, rowOf(this.attention, a * k + b));
        }
      }
      stay.push(!done[a] && !atLimit);
    }
    this.cum = newCum;
    if (!stay.every(Boolean)) {
      const keepRows = [];
      stay.forEach((s, a) => { if (s) for (let b = 0; b < k; b++) keepRows.push(a * k + b); });
      const kept = keepRows.map((r) => parents[r]);
      this.tokens = keepRows.map((r) => this.tokens[r]);
      if (this.attention !== null) this.attention = keepRows.map((r) => this.attention[r]);
      this.cum = Float32Array.from(keepRows, (r) => newCum[r]);
      this.examples = this.examples.filter((_, a) => stay[a]);
      return kept;
    }
    return parents;
  }

  candidates(example) {
    const rows = this.rowExample;
    const live = this.tokens.filter((_, r) => rows[r] === example && this.cum[r] > -Infinity);
    return [...live, ...this.finished[example].map((h) => h.tokens)];
  }
}

// --- the main loop ----------------------------------------------------------------------------------
/** Id lists -> right-padded int64 input ids and attention mask (1 = token), and their dims [B, S]. */
export function padSources(sources, padId) {
  const s = Math.max(1, ...sources.map((x) => x.length));
  const ids = new BigInt64Array(sources.length * s).fill(BigInt(padId));
  const mask = new BigInt64Array(sources.length * s);
  sources.forEach((x, i) => x.forEach((id, j) => {
    ids[i * s + j] = BigInt(id);
    mask[i * s + j] = 1n;
  }));
  return [ids, mask, [sources.length, s]];
}

/** Max decoding steps per sentence: maxDecodingLength, maxLengthA * srcLen + maxLengthB (srcLen counts the
 * source ids, EOS included), and the model's max_positions. */
export function stepLimits(sources, options, config) {
  const limit = Math.min(options.maxDecodingLength, config.max_positions);
  return sources.map((s) => {
    if (options.maxLengthA > 0 || options.maxLengthB !== null) {
      return Math.min(limit, Math.trunc(options.maxLengthA * s.length + (options.maxLengthB ?? 0)));
    }
    return limit;
  });
}

/** Decode `sources` (id lists ending with EOS); yields the search after every step (streaming) and returns, per
 * source, up to numHypotheses hypotheses, best first. strategy "beam" forces beam search even for beamSize 1. */
export async function* decodeSteps(engine, config, sources, options, prefixes = null, strategy = null) {
  const limits = stepLimits(sources, options, config);
  const results = sources.map(() => []);
  const todo = [];
  limits.forEach((limit, i) => (limit > 0 ? todo.push(i) : (results[i] = rank([], 1)))); // 0 steps: the empty hypothesis
  if (!todo.length) return results;
  const srcs = todo.map((i) => sources[i]);
  const todoLimits = todo.map((i) => limits[i]);
  let search;
  if (options.beamSize > 1 || strategy === "beam") {
    search = new BeamSearch(srcs.length, options.beamSize, todoLimits, config.eos_id, options.lengthPenalty, options.numHypotheses,
      options.beamRules, options.earlyStopping);
  } else {
    const width = options.sampling ? options.numHypotheses : 1;
    const sampler = options.sampling ? new Sampler(options, srcs, width) : null;
    search = new RowSearch(srcs.length, width, todoLimits, config.eos_id, options.lengthPenalty, sampler);
  }
  const filters = buildFilters(options, config, prefixes === null ? null : todo.map((i) => prefixes[i]), todoLimits);
  const vocab = config.vocab_size;

  // cross K/V and encoder mask: one row per sentence shared by its K beam rows when the decoder graph takes them
  // so (a beam search's sentences keep exactly K rows); else one copy per row
  const group = search instanceof BeamSearch && engine.crossPerSentence ? search.k : 1;
  const state = await DecoderState.encode(engine, ...padSources(srcs, config.pad_id), search.rowExample, group);
  let last = new BigInt64Array(search.rowExample.length).fill(BigInt(config.decoder_start_id ?? config.bos_id)); // [R]
  const maxSteps = Math.max(...todoLimits);
  for (let step = 0; step < maxSteps; step++) {
    const [logProbs, attention] = await state.step(last, options.returnAttention); // [R * V], [R * S] | null
    // a NaN or +inf logit makes its whole log-softmax row NaN: one column tells
    for (let r = 0; r < last.length; r++) if (!(logProbs[r * vocab + config.eos_id] < Infinity)) throw brokenGraph(engine, last.length);
    for (const applyFilter of filters) applyFilter(logProbs, vocab, search.tokens, search.rowExample, step);
    let parents;
    try {
      parents = search.advance(logProbs, vocab, step, attention);
    } catch (e) {
      if (e instanceof NonFiniteScores) throw brokenGraph(engine, last.length);
      throw e;
    }
    yield search;
    if (!parents.length) break;
    state.keep(parents); // beams reorder: the cache; rows leave: the cross K/V and mask too
    last = BigInt64Array.from(search.tokens, (row) => BigInt(row[row.length - 1]));
  }
  todo.forEach((i, j) => {
    results[i] = rank(search.finished[j], options.numHypotheses);
    for (const h of results[i]) { // the sentence's own source columns, no padding
      if (h.attention !== null) h.attention = h.attention.map((row) => row.slice(0, srcs[j].length));
    }
  });
  return results;
}

/** decodeSteps run to the end. */
export async function decode(engine, config, sources, options, prefixes = null, strategy = null) {
  const steps = decodeSteps(engine, config, sources, options, prefixes, strategy);
  for (;;) {
    const { value, done } = await steps.next();
    if (done) return value;
  }
}
