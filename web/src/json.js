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

/** Python's repr of a JSON value, cut to 60 characters: [:keep] and "..." past them (runtime/manifest.py _short
 * keeps 57; runtime/manifest_records.py _bad 60). */
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

/** Parse `text`; a SyntaxError names the position, a JsonDepthError says it nests too deep. */
export function parseJson(text, maxDepth = Infinity) {
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
    const value = Number(m[0]);
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
