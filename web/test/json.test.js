// src/json.js: JSON as Python's json.loads reads it, knowing a float lexeme from an integer.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { isInteger, JsonDepthError, JsonFloat, numberValue, parseJson, short } from "../src/json.js";
import { MODEL_DIR } from "./python.js";

const plain = (v) => JSON.parse(JSON.stringify(v, (k, x) => (x instanceof JsonFloat ? x.valueOf() : x)));

test("reads what JSON.parse reads, to the same values", () => {
  for (const file of ["manifest.json", "tokenizer.json"]) {
    const text = readFileSync(path.join(MODEL_DIR, file), "utf8");
    assert.deepEqual(plain(parseJson(text)), JSON.parse(text));
  }
  const text = '{"a": [1, -2.5e-3, "x\\u00e9\\n\\"", true, false, null, {}], "__proto__": {"b": 1}, "a": 2}';
  const value = parseJson(text);
  assert.deepEqual(plain(value), JSON.parse(text));
  assert.equal(Object.getPrototypeOf(value), Object.prototype); // "__proto__" is an own key, not the prototype
  assert.deepEqual(value.__proto__, { b: 1 });
});

test("a float lexeme is no integer, whatever its value; NaN and Infinity as Python reads them", () => {
  const v = parseJson('[200, 200.0, 2e2, 0.5, -0, NaN, Infinity, -Infinity]');
  assert.deepEqual(v.map(isInteger), [true, false, false, false, true, false, false, false]);
  assert.deepEqual(v.map(numberValue).slice(0, 5), [200, 200, 200, 0.5, -0]);
  assert.ok(v[1] instanceof JsonFloat && v[1] + 1 === 201);
  assert.equal(short(v[1]), "200.0");
  assert.equal(short(true), "True");
});

test("refuses what Python's json refuses, and nesting deeper than the limit", () => {
  for (const bad of ["{", "[1,]", "{'a': 1}", '{"a" 1}', "01", "1.", ".5", '"\t"', "[1] x", "", "\ufeff{}", "nan", "+1"]) {
    assert.throws(() => parseJson(bad), SyntaxError, JSON.stringify(bad));
  }
  assert.deepEqual(plain(parseJson("[".repeat(32) + "]".repeat(32), 32)), JSON.parse("[".repeat(32) + "]".repeat(32)));
  assert.throws(() => parseJson("[".repeat(33) + "]".repeat(33), 32), JsonDepthError);
  assert.throws(() => parseJson(`{"a": ${"[".repeat(32)}${"]".repeat(32)}}`, 32), JsonDepthError);
});
