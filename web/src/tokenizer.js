// The package's tokenizer.json in JS, giving the ids of Python's `tokenizers` (the tests compare them on
// thousands of texts): @huggingface/tokenizers does the work; this file adds what the runtime does around it
// (runtime/package/manifest.py _read_tokenizer, docs/CONTRACTS.md "Tokenizer and sequences"):
//  * encoding with specials as text (Python's encode_special_tokens = True): a literal "</s>" or "<pad>" in a
//    text is ordinary pieces, never a special id, so the special added tokens are not split out of texts;
//  * decoding skips the special tokens, as tokenizers' decode(ids) does by default;
//  * padding and truncation set in the file are ignored (the runtime pads and cuts itself);
//  * the Lowercase normalizer lowercases character by character, as Rust's tokenizers does (JS's toLowerCase
//    on a whole string writes a Greek capital sigma at the end of a word as the final sigma: another id);
//  * SentencePiece tokenizers (converted OPUS-MT / NLLB models) run as in Rust (rustLike below): the Precompiled
//    normalizer applies the charsmap itself (precompiled.js; the library's is NFKC), the Unigram model is Rust's
//    (unigram.js), Strip strips Unicode White_Space (JS's trim also strips U+FEFF, not U+0085), the Metaspace
//    pre-tokenizer splits before each replacement character (split, default true; the library never splits) and
//    its decoder drops every replacement character of the first token (the library only a leading space);
//  * the checks: the file as Rust tokenizers reads it, with the trainer's regular expressions only
//    (tokenizer_json.js), no post-processor, ids exactly 0..vocab_size-1, vocab_size and special tokens as the config.
import { LowercaseNormalizer, MetaspaceDecoder, MetaspacePreTokenizer, PrecompiledNormalizer, StripNormalizer, Tokenizer,
  Unigram } from "@huggingface/tokenizers";
import { ModelPackageError } from "./errors.js";
import { isInteger, short } from "./json.js";
import { PrecompiledCharsmap } from "./precompiled.js";
import { foreignRegex, parseTokenizerJson } from "./tokenizer_json.js";
import { RustUnigram } from "./unigram.js";

export const SPECIAL_ROLES = ["pad", "bos", "eos", "unk"]; // manifest special_tokens keys; the config has {role}_id

/** token -> id of the tokenizer's model and added tokens (tokenizers' get_vocab(with_added_tokens=True)). */
function vocabulary(json) {
  const vocab = new Map();
  const model = json.model ?? {};
  if (Array.isArray(model.vocab)) model.vocab.forEach((entry, id) => vocab.set(Array.isArray(entry) ? entry[0] : entry, id)); // Unigram
  else if (model.vocab && typeof model.vocab === "object") for (const [token, id] of Object.entries(model.vocab)) vocab.set(token, id);
  for (const added of json.added_tokens ?? []) vocab.set(added.content, added.id);
  return vocab;
}

/** Lowercase each character on its own (Rust's char::to_lowercase, no context), as tokenizers' Lowercase does. */
function lowercaseByCharacter(text) {
  let out = "";
  for (const ch of text) out += ch.toLowerCase();
  return out;
}

const RUST_WHITESPACE_START = /^\p{White_Space}+/u; // Rust's char::is_whitespace
const RUST_WHITESPACE_END = /\p{White_Space}+$/u;

function stripLikeRust(text, { strip_left: left, strip_right: right }) {
  if (left) text = text.replace(RUST_WHITESPACE_START, "");
  return right ? text.replace(RUST_WHITESPACE_END, "") : text;
}

function normalizersLikeRust(normalizer) {
  if (!normalizer) return;
  if (normalizer instanceof LowercaseNormalizer) normalizer.normalize = lowercaseByCharacter;
  if (normalizer instanceof StripNormalizer) normalizer.normalize = (text) => stripLikeRust(text, normalizer.config);
  if (normalizer instanceof PrecompiledNormalizer) {
    const charsmap = new PrecompiledCharsmap(normalizer.config.precompiled_charsmap);
    normalizer.normalize = (text) => charsmap.normalize(text);
  }
  for (const inner of normalizer.normalizers ?? []) normalizersLikeRust(inner);
}

/** Metaspace's pre-tokenization (tokenizers/src/pre_tokenizers/metaspace.rs): spaces -> the replacement, which is
 * prepended (prepend_scheme "always"; tokenizer_json.js refuses "first") unless there, then a split before each one. */
function metaspaceLikeRust(pre, config) {
  const replacement = pre.replacement;
  const split = config.split ?? true;
  pre.pre_tokenize_text = (text) => {
    let normalized = text.replaceAll(" ", replacement);
    if (normalized && !normalized.startsWith(replacement) && pre.prepend_scheme === "always") {
      normalized = replacement + normalized;
    }
    if (!split) return [normalized];
    const pieces = [];
    let from = 0;
    for (let at = normalized.indexOf(replacement, 1); at !== -1; at = normalized.indexOf(replacement, at + replacement.length)) {
      pieces.push(normalized.slice(from, at));
      from = at;
    }
    pieces.push(normalized.slice(from));
    return pieces.filter((piece) => piece.length > 0);
  };
}

/** The library's components made to do what Rust's do (the file's header lists what differs). */
function rustLike(tokenizer, json) {
  normalizersLikeRust(tokenizer.normalizer);
  const pres = [[tokenizer.pre_tokenizer, json.pre_tokenizer]];
  for (const [pre, config] of pres) {
    if (pre instanceof MetaspacePreTokenizer) metaspaceLikeRust(pre, config);
    (pre?.tokenizers ?? []).forEach((inner, i) => pres.push([inner, config.pretokenizers[i]]));
  }
  const decoders = [[tokenizer.decoder, json.decoder]];
  for (const [decoder, config] of decoders) {
    if (decoder instanceof MetaspaceDecoder) {
      const keepFirst = (config.prepend_scheme ?? "always") === "never"; // Rust's Metaspace decode_chain
      decoder.decode_chain = (tokens) => tokens.map((token, i) =>
        Array.from(token, (c) => (c === decoder.replacement ? (i === 0 && !keepFirst ? "" : " ") : c)).join(""));
    }
    (decoder?.decoders ?? []).forEach((inner, i) => decoders.push([inner, config.decoders[i]]));
  }
  if (tokenizer.model instanceof Unigram) {
    const model = tokenizer.model;
    const rust = new RustUnigram(json.model);
    model.fuse_unk = false; // RustUnigram fuses unknowns itself
    // the library maps the strings back to ids by its vocabulary (ids are one per token: the constructor's check)
    model.encode = (pretokens) => pretokens.flatMap((text) => rust.tokenize(text).map((id) => rust.pieces[id]));
    // the library's own trie of the vocabulary serves only its encode (populate_nodes), replaced above: let it go
    // (27 MiB of the JS heap at a vocabulary of 58,101)
    model.trie = null;
  }
}

export class PackageTokenizer {
  /** text: the tokenizer.json text; path: names it in errors; vocab_size: the ids it must have (the checked config's
   * vocab_size, or src_vocab_size for a source tokenizer of its own: vocabName names the field in errors);
   * manifestVocabSize: the manifest's vocab_size field, which that error shows as Python's does. */
  constructor(text, path, { vocab_size: vocabSize, vocabName = "vocab_size", manifestVocabSize }, { reexport }) {
    let json;
    try {
      json = parseTokenizerJson(text); // what Rust tokenizers (the Python runtime) refuses: tokenizer_json.js
    } catch (e) {
      throw new ModelPackageError(`${path} is not a tokenizers JSON file (${e.message.split("\n")[0]}); ${reexport}`);
    }
    const foreign = foreignRegex(json);
    if (foreign !== null) {
      throw new ModelPackageError(`${path}: its ${foreign[0]} uses the regular expression ${short(foreign[1])}, which ` +
        `seq2onnx's tokenizer never writes (a regular expression can take minutes on a short text); ${reexport}`);
    }
    if (json.post_processor != null) {
      throw new ModelPackageError(`${path} has a post-processor, which would add ids to every text: a seq2onnx ` +
        `tokenizer has none (the model code adds EOS); ${reexport}`);
    }
    this.path = path;
    this.reexport = reexport;
    this.vocab = vocabulary(json);
    this.tokens = [];
    for (const [token, id] of this.vocab) this.tokens[id] = token;
    const size = this.vocab.size;
    const ids = [...this.vocab.values()].sort((a, b) => a - b);
    if (size !== vocabSize) {
      throw new ModelPackageError(`${path} has ${size} tokens but the model config has ${vocabName} ${vocabSize} ` +
        `(manifest vocab_size ${short(manifestVocabSize)}): the tokenizer does not belong to this model; ${reexport}`);
    }
    if (!ids.every((id, i) => id === i)) {
      throw new ModelPackageError(`${path}: its token ids are not exactly 0..${size - 1}, one per token: the tokenizer ` +
        `is broken; ${reexport}`);
    }
    const added = Array.isArray(json.added_tokens) ? json.added_tokens : [];
    this.specialIds = new Set(added.filter((t) => t.special).map((t) => t.id));
    const forLibrary = { ...json, added_tokens: added.filter((t) => !t.special), padding: null, truncation: null };
    try {
      this.tokenizer = new Tokenizer(forLibrary, { clean_up_tokenization_spaces: false });
      rustLike(this.tokenizer, json);
      this.tokenizer.encode("a", { add_special_tokens: false }); // a component it cannot run fails here, at load
    } catch (e) {
      throw new ModelPackageError(`${path}: the JS tokenizer cannot read it (${String(e.message).split("\n")[0]}); ${reexport}`);
    }
  }

  /** The checks against the manifest: its vocab_size and special_tokens (runtime/package/manifest.py). */
  checkManifest(manifest, config, where, reexport) {
    const declared = manifest.vocab_size ?? config.vocab_size;
    if (!isInteger(declared) || declared !== config.vocab_size) {
      if (manifest.vocab_size != null && !isInteger(manifest.vocab_size)) {
        throw new ModelPackageError(`${where}: the field vocab_size should be an integer, got ${short(manifest.vocab_size)}; ${reexport}`);
      }
      throw new ModelPackageError(`${this.path} has ${this.vocab.size} tokens but the model config has vocab_size ` +
        `${config.vocab_size} (manifest vocab_size ${short(manifest.vocab_size)}): the tokenizer does not belong to ` +
        `this model; ${reexport}`);
    }
    const specials = manifest.special_tokens ?? {};
    if (typeof specials !== "object" || Array.isArray(specials)) {
      throw new ModelPackageError(`${where}: the field special_tokens should be an object, got ${short(specials)}; ${reexport}`);
    }
    for (const role of SPECIAL_ROLES) {
      const token = Object.hasOwn(specials, role) ? specials[role] : null;
      if (token === null) continue;
      if (typeof token !== "string") {
        throw new ModelPackageError(`${where}: the field special_tokens.${role} should be a string, got ${short(token)}; ${reexport}`);
      }
      const want = config[`${role}_id`];
      if (this.tokenToId(token) !== want) {
        throw new ModelPackageError(`${this.path}: special token ${role}=${short(token)} has id ` +
          `${this.tokenToId(token) ?? "None"}, the config says ${want}; ${reexport}`);
      }
    }
  }

  /** text -> ids, without specials (the model code adds EOS); a literal special token is ordinary text. */
  encode(text) {
    try {
      return this.tokenizer.encode(text, { add_special_tokens: false }).ids;
    } catch (e) {
      throw this.broken(e);
    }
  }

  /** An error of the tokenizer's own code (a corrupt charsmap, a Unigram model without unk_id) as one line naming the
   * file, as the Python runtime reports a panic of Rust tokenizers (runtime/package/tokenizer.py). */
  broken(e) {
    if (e instanceof ModelPackageError) return e;
    return new ModelPackageError(`${this.path}: the tokenizer failed (${String(e?.message ?? e).split("\n")[0]}): the ` +
      `file is broken; ${this.reexport}`);
  }

  /** ids -> text, special tokens skipped (tokenizers' decode). */
  decode(ids) {
    const kept = ids.filter((id) => !this.specialIds.has(id) && id >= 0 && id < this.tokens.length);
    try {
      return kept.length ? this.tokenizer.decode(kept, { skip_special_tokens: false }) : "";
    } catch (e) {
      throw this.broken(e);
    }
  }

  tokenToId(token) {
    return this.vocab.get(token);
  }

  idToToken(id) {
    return this.tokens[id];
  }
}
