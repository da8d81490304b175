// SentencePiece's normalization (the "precompiled_charsmap" of a model trained with nmt_nfkc, OPUS-MT's), exactly as
// Rust tokenizers applies it (crate spm_precompiled, and tokenizers/src/normalizers/precompiled.rs), so that Node and
// the browser give the ids of the Python runtime. @huggingface/tokenizers' Precompiled only approximates the charsmap
// with NFKC (transformers.js issues #63, #70, #841); this file reads the charsmap itself.
//
// The charsmap: [u32 LE: trie byte size][the trie: u32 LE units of a double-array trie (Darts) over UTF-8 bytes]
// [normalized: UTF-8 strings, each ended by a 0 byte]. A trie leaf's value is the byte offset of a key's
// replacement in `normalized`. Rust's rule, applied to the text one extended grapheme cluster at a time:
//  * a cluster of fewer than 6 UTF-8 bytes whose bytes start with a key becomes that key's replacement -- the
//    replacement of the SHORTEST key that is a prefix of the cluster, the rest of the cluster dropped (Rust: "Yes,
//    this seems broken ... If you question this code, check this normalizer against XNLI");
//  * otherwise each character on its own: its replacement if one of its prefixes is a key, else itself.
// A corrupt charsmap that makes Rust panic (an index outside the trie or the strings) is an Error here.
const utf8 = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const CACHE_LIMIT = 50_000; // chunk -> replacement memo, cleared when full (a long text repeats few clusters)
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** base64 as Rust's base64 crate (STANDARD) decodes it: canonical padding and no stray bits, else null. */
function decodeBase64(text) {
  if (typeof text !== "string" || !BASE64.test(text)) return null;
  const binary = atob(text);
  if (btoa(binary) !== text) return null; // non-zero bits after the last byte: the crate refuses them
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

/** The charsmap's parts, or a one-line reason why spm_precompiled (and so the Python runtime) refuses it. */
export function parsePrecompiledCharsmap(base64) {
  const bytes = decodeBase64(base64);
  if (bytes === null) throw new Error("its precompiled_charsmap is not base64");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (bytes.length < 4) throw new Error("its precompiled_charsmap cannot be parsed (no trie size)");
  const units = Math.floor(view.getUint32(0, true) / 4);
  if (4 + 4 * units > bytes.length) throw new Error("its precompiled_charsmap cannot be parsed (the trie is cut short)");
  const trie = new Uint32Array(units);
  for (let i = 0; i < units; i++) trie[i] = view.getUint32(4 + 4 * i, true);
  const normalized = bytes.subarray(4 + 4 * units);
  try {
    strictUtf8.decode(normalized);
  } catch {
    throw new Error("its precompiled_charsmap's replacement strings are not UTF-8");
  }
  return { trie, normalized };
}

const isContinuationByte = (b) => (b & 0xc0) === 0x80;

export class PrecompiledCharsmap {
  /** base64: the normalizer's precompiled_charsmap field (throws Error as parsePrecompiledCharsmap). */
  constructor(base64) {
    ({ trie: this.trie, normalized: this.normalized } = parsePrecompiledCharsmap(base64));
    this.cache = new Map();
    this.graphemes = new Intl.Segmenter(undefined, { granularity: "grapheme" });
  }

  unit(pos) {
    if (pos >= this.trie.length) throw new Error("the precompiled_charsmap's trie is corrupt (an index past its end)");
    return this.trie[pos];
  }

  /** DoubleArray::common_prefix_search(key)[0]: the value of the shortest key that prefixes `bytes`, or null. Walks
   * the whole key as Rust does (a corrupt trie fails on the same texts). */
  firstPrefixValue(bytes) {
    const offset = (u) => (u >>> 10) * ((u & 512) ? 256 : 1); // (u >> 10) << ((u & (1 << 9)) >> 6)
    let first = null;
    let pos = offset(this.unit(0));
    for (const c of bytes) {
      if (c === 0) break;
      pos = (pos ^ c) >>> 0;
      const u = this.unit(pos);
      if (((u & 0x800000ff) >>> 0) !== c) return first; // label(): the byte, or bit 31 set (no node)
      pos = (pos ^ offset(u)) >>> 0;
      if (((u >>> 8) & 1) === 1 && first === null) first = this.unit(pos) & 0x7fffffff; // has_leaf(), value()
    }
    return first;
  }

  /** Precompiled::transform: the replacement of `bytes` (a UTF-8 chunk), or null. */
  transform(bytes) {
    const index = this.firstPrefixValue(bytes);
    if (index === null) return null;
    const n = this.normalized;
    if (index > n.length || (index < n.length && isContinuationByte(n[index]))) {
      throw new Error("the precompiled_charsmap's trie points outside its replacement strings"); // Rust: a panic
    }
    let end = index;
    while (end < n.length && n[end] !== 0) end++;
    return strictUtf8.decode(n.subarray(index, end));
  }

  /** chunk (a string) -> its replacement or null, memoized. */
  chunk(text) {
    let out = this.cache.get(text);
    if (out === undefined) {
      out = this.transform(utf8.encode(text));
      if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
      this.cache.set(text, out);
    }
    return out;
  }

  /** One extended grapheme cluster -> its normalization (the body of Rust's loop). */
  cluster(segment) {
    if (segment.length === 1) return this.chunk(segment) ?? segment; // one UTF-16 unit: < 6 bytes, one character
    if (utf8Length(segment) < 6) {
      const whole = this.chunk(segment);
      if (whole !== null) return whole;
    }
    let out = "";
    for (const ch of segment) out += this.chunk(ch) ?? ch;
    return out;
  }

  /** text -> the normalized text (Precompiled::normalize_string). */
  normalize(text) {
    let out = "";
    if (ASCII.test(text)) { // every ASCII character is a cluster of its own, but CR LF (Unicode's rule GB3)
      for (let i = 0; i < text.length; i++) {
        const pair = text[i] === "\r" && text[i + 1] === "\n";
        out += this.cluster(pair ? "\r\n" : text[i]);
        if (pair) i++;
      }
      return out;
    }
    for (const { segment } of this.graphemes.segment(text)) out += this.cluster(segment);
    return out;
  }
}

const ASCII = /^[\x00-\x7f]*$/;

/** The UTF-8 byte count of a well-formed string (a lone surrogate counts 3, as TextEncoder writes U+FFFD). */
function utf8Length(text) {
  let n = 0;
  for (const ch of text) {
    const cp = ch.codePointAt(0);
    n += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  }
  return n;
}
