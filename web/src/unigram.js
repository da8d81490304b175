// The Unigram model (SentencePiece's) as Rust tokenizers runs it (tokenizers/src/models/unigram/model.rs:
// encode_optimized and tokenize), for tokenizer.js. @huggingface/tokenizers' Unigram differs from it: it scores a
// "<unk>" piece of the vocabulary at the unknown penalty instead of its own score, fuses unknowns by the strings'
// vocabulary lookup after the fact, and has no byte_fallback. Here:
//  * Viterbi over the characters: at each start (in order) every vocabulary piece that prefixes the rest (shortest
//    first) offers best[start] + score to the node at its end, which takes it only if strictly better than what it
//    holds (the first offer wins a tie); where no piece of exactly one character starts, the unknown (one
//    character, min score - 10) offers too, and without an unk_id it is an Error only if that offer wins (Rust's
//    MissingUnkId). Scores are f64, as read by serde_json (tokenizer_json.js), added in Rust's order: an exact tie
//    there is one here, and no rounding differs;
//  * the best path read back, consecutive pieces whose id is unk_id fused into one string (fuse_unk, always on);
//  * each string -> its id by vocabulary lookup; a string the vocabulary lacks -> <0xXX> pieces of its UTF-8 bytes
//    when byte_fallback is set and every one exists, else unk_id (and an Error without one, as Rust's MissingUnkId).
const UNK_PENALTY = 10; // K_UNK_PENALTY
const utf8 = new TextEncoder();

class TrieNode {
  constructor() {
    this.leaf = false;
    this.children = new Map(); // character -> TrieNode
  }
}

export class RustUnigram {
  /** model: the tokenizer.json's Unigram model (checked by tokenizer_json.js: vocab [[piece, score], ..], unk_id). */
  constructor(model) {
    this.pieces = model.vocab.map(([piece]) => piece);
    this.scores = model.vocab.map(([, score]) => score);
    this.unkId = model.unk_id ?? null;
    this.byteFallback = model.byte_fallback ?? false;
    this.ids = new Map();
    this.root = new TrieNode();
    this.pieces.forEach((piece, id) => {
      this.ids.set(piece, id); // a repeated piece: the last id, as Rust's map
      let node = this.root;
      for (const ch of piece) {
        let child = node.children.get(ch);
        if (child === undefined) node.children.set(ch, (child = new TrieNode()));
        node = child;
      }
      node.leaf = true;
    });
    let min = Infinity;
    for (const score of this.scores) if (score < min) min = score;
    this.unkScore = min - UNK_PENALTY;
  }

  missingUnk() {
    return new Error("the tokenizer met a character its vocabulary lacks and its Unigram model has no unk_id");
  }

  /** One pre-token -> the strings of its best segmentation, unknowns fused (encode_optimized). */
  segment(sentence) {
    const chars = Array.from(sentence);
    const n = chars.length;
    const score = new Float64Array(n + 1); // best path score ending at each position
    const start = new Int32Array(n + 1).fill(-1); // where that path's last piece starts (-1: none yet)
    const id = new Int32Array(n + 1);
    const offer = (from, to, s, pieceId) => {
      const candidate = s + score[from];
      if (start[to] === -1 || candidate > score[to]) {
        if (pieceId === null) throw this.missingUnk();
        score[to] = candidate;
        start[to] = from;
        id[to] = pieceId;
      }
    };
    for (let from = 0; from < n; from++) {
      let single = false;
      let node = this.root;
      let piece = "";
      for (let end = from; end < n; end++) {
        node = node.children.get(chars[end]);
        if (node === undefined) break;
        piece += chars[end];
        if (!node.leaf) continue;
        const pieceId = this.ids.get(piece);
        offer(from, end + 1, this.scores[pieceId], pieceId);
        if (end === from) single = true;
      }
      if (!single) offer(from, from + 1, this.unkScore, this.unkId);
    }
    const out = [];
    let fused = [];
    for (let end = n; end > 0; end = start[end]) {
      const text = chars.slice(start[end], end).join("");
      if (id[end] === this.unkId) {
        fused.push(text);
        continue;
      }
      if (fused.length) out.push(fused.reverse().join(""));
      fused = [];
      out.push(text);
    }
    if (fused.length) out.push(fused.reverse().join(""));
    return out.reverse();
  }

  /** One pre-token -> its ids (Unigram::tokenize). */
  tokenize(sentence) {
    const ids = [];
    for (const text of this.segment(sentence)) {
      const known = this.ids.get(text);
      if (known !== undefined) {
        ids.push(known);
        continue;
      }
      if (this.byteFallback) {
        const bytes = [...utf8.encode(text)].map((b) => this.ids.get(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`));
        if (bytes.every((b) => b !== undefined)) {
          ids.push(...bytes);
          continue;
        }
      }
      if (this.unkId === null) throw this.missingUnk();
      ids.push(this.unkId);
    }
    return ids;
  }
}
