// The decoder's state between steps, owned in one place (a port of runtime/decode/decoder_state.py): the self-attention cache
// (with each row's written length), the cross K/V and the encoder mask, and how rows map onto them. The decoding loop
// (decoding.js) steps it and keeps the rows it goes on with; extend adds newly encoded rows to it.
//
// Rows and cross rows: with `group` G > 1 the G rows of a sentence share its one cross K/V row (a beam search's K rows,
// when the decoder graph takes cross K/V per sentence: engine.crossPerSentence); with G = 1 every row has its own copy.
// keep(parents) takes, for the rows that go on, each one's parent row; a parent is always a row of the same sentence
// (a beam search reorders within a sentence; a row that ends leaves), so the cross rows stay right when only the cache
// is gathered, and the cross K/V are gathered only when rows leave.
//
// Rows at different positions: extend adds rows that have written nothing (length 0) to rows that have; the decoder
// step of contract 3 takes each row's position, older contracts one for all (engine.rowsAtOwnPositions): extend needs
// the first, or a state that has not stepped yet. A misuse is a RangeError (Python's ValueError).
/** The engine interface's flags and names, with their defaults (engine.js lists the methods): engines derive from it,
 * so that decoding reads them directly instead of probing for them (runtime/engine/base.py Engine). */
export class EngineBase {
  crossPerSentence = false; // the decoder step takes cross K/V per sentence (R = B x G rows)
  rowsAtOwnPositions = false; // contract 3: each row its own position, so rows may join a batch that stepped
  decoderPath = "the decoder step graph";

  /** The file of the graph that steps `rows` rows, for errors about its output. */
  decoderPathFor(rows) {
    return this.decoderPath;
  }
}

/** index is 0, 1, ..., n - 1 */
function isIdentity(index, n) {
  return index.length === n && index.every((v, i) => v === i);
}

/** encoderMask [B, S] and cross (2 per layer, [B, H, S, Dh]) for R = B x group rows; past: the cache (null before the
 * first step). */
export class DecoderState {
  constructor(engine, encoderMask, cross, group = 1) {
    Object.assign(this, { engine, encoderMask, cross: [...cross], group });
    this.past = null;
    this.rows = encoderMask.dims[0] * group;
  }

  /** Run the encoder on the sources once (inputIds, attentionMask BigInt64Array [B*S], dims [B, S]); rows:
   * rowExample[r] is row r's source (null: one row each), or with group G > 1 the G rows of each source share its
   * cross row (rowExample then is unused). */
  static async encode(engine, inputIds, attentionMask, dims, rowExample = null, group = 1) {
    let [encoderMask, cross] = await engine.encode(inputIds, attentionMask, dims);
    if (group === 1 && rowExample !== null && !isIdentity(rowExample, dims[0])) {
      [encoderMask, ...cross] = engine.take([encoderMask, ...cross], rowExample); // each source -> its rows
    }
    return new DecoderState(engine, encoderMask, cross, group);
  }

  /** last BigInt64Array [R] -> [logProbs Float32Array [R*V], attention Float32Array [R*S] | null]; the cache
   * advances. */
  async step(last, withAttention = false) {
    const [logProbs, present, attention] = await this.engine.step(last, this.encoderMask, this.past, this.cross, withAttention);
    this.past = present;
    return [logProbs, withAttention ? attention : null];
  }

  /** Go on with parents.length rows, row i continuing parents[i] (a row of the same sentence): one gather of the cache
   * when beams reorder; the cross K/V and mask too when rows leave (by sentence when shared). */
  keep(parents) {
    if (isIdentity(parents, this.rows)) return;
    if (parents.length === 0) {
      this.past = null;
      this.rows = 0;
      return;
    }
    if (parents.length < this.rows) {
      const g = this.group;
      const by = g > 1 ? parents.filter((_, i) => i % g === 0).map((p) => Math.floor(p / g)) : parents;
      [this.encoderMask, ...this.cross] = this.engine.take([this.encoderMask, ...this.cross], by);
    }
    if (this.past !== null) this.past = this.engine.take(this.past, parents);
    this.rows = parents.length;
  }

  /** Append `other`'s rows (newly encoded: it has not stepped) after this state's: their cache is empty (length 0),
   * their cross K/V and mask are padded to the longer source with masked positions. */
  extend(other) {
    if (other.past !== null || other.group !== 1 || (this.group !== 1 && this.rows)) {
      throw new RangeError("extend adds rows that have not stepped to a state of one row per cross row");
    }
    if (this.rows === 0) {
      Object.assign(this, { encoderMask: other.encoderMask, cross: other.cross, group: 1, past: null, rows: other.rows });
      return;
    }
    if (this.past !== null && !this.engine.rowsAtOwnPositions) {
      throw new RangeError("this decoder step takes one position for all rows (a package before manifest format 4): " +
        "rows cannot join a batch that has stepped");
    }
    [this.encoderMask, ...this.cross] = this.engine.appendRows([this.encoderMask, ...this.cross], [other.encoderMask, ...other.cross]);
    if (this.past !== null) this.past = this.engine.appendEmptyCache(this.past, other.rows);
    this.rows += other.rows;
  }
}
