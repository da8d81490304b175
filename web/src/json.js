// A strict JSON reader for manifest.json that keeps what JSON.parse loses and Python's json keeps:
// whether a number was written as an integer ("200") or as a float ("200.0", "2e2"). Python refuses a float
// where the contract wants an integer (vocab_size 200.0, format_version 1.0); so does this reader's caller:
// a float lexeme with an integral value becomes a Number *object* (`new JsonFloat(200)`), which computes and
// prints as 200 but is no integer to `isInteger` below. Like Python's json.loads it accepts NaN, Infinity and
// -Infinity (the range checks then refuse them where a field is read), and the last of duplicate keys wins.
// Objects and arrays nested deeper than `maxDepth` levels are refused while parsing (MAX_JSON_DEPTH).

export class JsonFloat extends Number {}

/** An integer as Python's json reads one (a float lexeme such as 1.0 is none; a bool is none). */
export function isInteger(value) {
  return typeof value === "number" && Number.isInteger(value);
}

/** A number (integer or float; a bool is none), as a primitive, or null. */
export function numberValue(value) {
  if (typeof value === "number") return value;
  if (value instanceof JsonFloat) return value.valueOf();
  return null;
}

/** Python's repr of a string: single quotes unless it holds ' and no ", backslash escapes, \xNN / \uNNNN /
 * \UNNNNNNNN for what str.isprintable() calls unprintable (Unicode's C and Z categories but the space). */
export function pyRepr(text) {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  const named = { "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", [quote]: `\\${quote}` };
  let out = "";
  for (const c of text) {
    const code = c.codePointAt(0);
    if (Object.hasOwn(named, c)) out += named[c];
    else if (c === " " || !/[\p{C}\p{Z}]/u.test(c)) out += c;
    else if (code < 0x100) out += `\\x${code.toString(16).padStart(2, "0")}`;
    else if (code < 0x10000) out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += `\\U${code.toString(16).padStart(8, "0")}`;
  }
  return quote + out + quote;
}

/** Python's repr of a JSON value, cut to 60 characters: [:keep] and "..." past them (runtime/package/manifest.py _short
 * keeps 57; runtime/package/manifest_records.py _bad 60). */
export function short(value, keep = 57) {
  let text;
  if (value === null || value === undefined) text = "None";
  else if (value === true) text = "True";
  else if (value === false) text = "False";
  else if (value instanceof JsonFloat) text = `${value.valueOf()}.0`;
  else if (typeof value === "string") text = pyRepr(value);
  else if (typeof value === "number") text = Number.isNaN(value) ? "nan" : Number.isFinite(value) ? String(value) : value > 0 ? "inf" : "-inf";
  else text = JSON.stringify(value, (k, v) => (v instanceof JsonFloat ? v.valueOf() : v));
  return text.length <= 60 ? text : `${text.slice(0, keep)}...`;
}

export class JsonDepthError extends Error {}

const WHITESPACE = new Set([" ", "\t", "\n", "\r"]);
const ESCAPES = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
const NUMBER = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/y;

const U64_MAX = 2n ** 64n - 1n;
const I32_MAX = 2 ** 31 - 1;
const POW10 = Array.from({ length: 309 }, (_, k) => Number(`1e${k}`)); // serde_json's table: each correctly rounded

/** A JSON number lexeme as serde_json reads it into an f64 without its float_roundtrip feature, as Rust tokenizers
 * (the Python runtime) is built (serde_json de.rs: parse_integer .. f64_from_parts): up to 19-20 digits of
 * significand in a u64, the digits past that dropped, then significand as f64, times or divided by 10^|exponent|.
 * That rounds twice, so it is off by an ulp from JSON.parse's correctly rounded value on some lexemes of 16 or more
 * digits (such as the Unigram scores of a converted SentencePiece model, where an ulp decides a tie in the Viterbi).
 * Where serde_json refuses a number as out of range: +-Infinity (the caller refuses it). */
export function serdeNumber(lexeme) {
  const positive = lexeme[0] !== "-";
  let i = positive ? 0 : 1;
  const digit = () => (lexeme[i] >= "0" && lexeme[i] <= "9" ? BigInt(lexeme.charCodeAt(i) - 48) : null);
  const overflows = (significand, d) => significand * 10n + d > U64_MAX;
  let significand = 0n;
  let exponent = 0;
  let d;
  // the integer part: once the u64 would overflow, each further digit only counts in the exponent
  while ((d = digit()) !== null && !overflows(significand, d)) {
    significand = significand * 10n + d;
    i++;
  }
  for (; digit() !== null; i++) exponent++;
  if (lexeme[i] === ".") {
    for (i++; (d = digit()) !== null && !overflows(significand, d); i++) {
      significand = significand * 10n + d;
      exponent--;
    }
    while (digit() !== null) i++; // the digits past a full u64: dropped
  } else if (lexeme[i] === undefined && exponent === 0) {
    return positive ? Number(significand) : -Number(significand); // an integer: a u64 or i64, exact to the f64
  }
  if (lexeme[i] === "e" || lexeme[i] === "E") {
    i++;
    const negative = lexeme[i] === "-";
    if (lexeme[i] === "-" || lexeme[i] === "+") i++;
    let exp = 0;
    for (; digit() !== null; i++) {
      const e = Number(digit());
      if (exp > (I32_MAX - e) / 10) { // the i32 exponent overflows: zero, or out of range
        if (significand !== 0n && !negative) return positive ? Infinity : -Infinity;
        return positive ? 0 : -0;
      }
      exp = exp * 10 + e;
    }
    exponent = Math.max(-(2 ** 31), Math.min(I32_MAX, negative ? exponent - exp : exponent + exp)); // saturating
  }
  let f = Number(significand); // u64 as f64: to nearest, ties to even
  for (;;) {
    const pow = POW10[Math.abs(exponent)];
    if (pow !== undefined) {
      f = exponent >= 0 ? f * pow : f / pow;
      break;
    }
    if (f === 0) break;
    if (exponent >= 0) return positive ? Infinity : -Infinity;
    f /= 1e308;
    exponent += 308;
  }
  return positive ? f : -f;
}

/** Parse `text`; a SyntaxError names the position, a JsonDepthError says it nests too deep. `toNumber` reads a number
 * lexeme (Number: Python's json, correctly rounded; serdeNumber: Rust's serde_json). */
export function parseJson(text, maxDepth = Infinity, toNumber = Number) {
  let i = 0;
  const fail = (what) => {
    throw new SyntaxError(`${what} at character ${i}`);
  };
  const skip = () => {
    while (i < text.length && WHITESPACE.has(text[i])) i++;
  };
  const literal = (word, value) => {
    if (text.startsWith(word, i)) {
      i += word.length;
      return value;
    }
    return fail("expecting a value");
  };
  const string = () => {
    i++; // the opening quote
    let out = "";
    let start = i;
    for (;;) {
      if (i >= text.length) fail("unterminated string");
      const c = text.charCodeAt(i);
      if (c === 0x22) break;
      if (c < 0x20) fail("invalid control character in a string");
      if (c === 0x5c) {
        out += text.slice(start, i);
        const e = text[i + 1];
        if (e === "u") {
          const hex = text.slice(i + 2, i + 6);
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail("invalid \\uXXXX escape");
          out += String.fromCharCode(parseInt(hex, 16));
          i += 6;
        } else if (e !== undefined && Object.hasOwn(ESCAPES, e)) {
          out += ESCAPES[e];
          i += 2;
        } else fail("invalid escape");
        start = i;
      } else i++;
    }
    out += text.slice(start, i);
    i++; // the closing quote
    return out;
  };
  const number = () => {
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) {
      if (text.startsWith("-Infinity", i)) return literal("-Infinity", -Infinity);
      return fail("expecting a value");
    }
    i = NUMBER.lastIndex;
    const value = toNumber(m[0]);
    return (m[1] || m[2]) && Number.isInteger(value) ? new JsonFloat(value) : value;
  };
  const value = (depth) => {
    skip();
    const c = text[i];
    if (c === "{" || c === "[") {
      if (depth > maxDepth) throw new JsonDepthError(`nested deeper than ${maxDepth} levels`);
      return c === "{" ? object(depth) : array(depth);
    }
    if (c === '"') return string();
    if (c === "t") return literal("true", true);
    if (c === "f") return literal("false", false);
    if (c === "n") return literal("null", null);
    if (c === "N") return literal("NaN", NaN);
    if (c === "I") return literal("Infinity", Infinity);
    return number();
  };
  const object = (depth) => {
    const out = {};
    i++;
    skip();
    if (text[i] === "}") {
      i++;
      return out;
    }
    for (;;) {
      skip();
      if (text[i] !== '"') fail("expecting a property name in double quotes");
      const key = string();
      skip();
      if (text[i] !== ":") fail("expecting ':'");
      i++;
      // defineProperty: a key "__proto__" is an own property, as JSON.parse makes it, never the prototype
      Object.defineProperty(out, key, { value: value(depth + 1), enumerable: true, writable: true, configurable: true });
      skip();
      if (text[i] === ",") i++;
      else if (text[i] === "}") {
        i++;
        return out;
      } else fail("expecting ',' or '}'");
    }
  };
  const array = (depth) => {
    const out = [];
    i++;
    skip();
    if (text[i] === "]") {
      i++;
      return out;
    }
    for (;;) {
      out.push(value(depth + 1));
      skip();
      if (text[i] === ",") i++;
      else if (text[i] === "]") {
        i++;
        return out;
      } else fail("expecting ',' or ']'");
    }
  };
  const result = value(1);
  skip();
  if (i < text.length) fail("extra data");
  return result;
}
