// One manifest schema: the constants the JS reader checks a package by (src/config.js, manifest.js,
// manifest_records.js, external_data.js, engine.js, tokenizer.js, options.js) against the Python runtime's own, read from it in this run
// (test/python_reference.py "schema"): a rule changed on one side only fails here.
import assert from "node:assert/strict";
import { before, test } from "node:test";
import { CHOICES, CONFIG_FIELDS, FORMAT_3_DEFAULTS, RANGES } from "../src/config.js";
import { decoderFormat, READ_FORMAT_VERSIONS } from "../src/engine.js";
import { DTYPES, FIELD, KEYS, NUMBER } from "../src/external_data.js";
import * as manifest from "../src/manifest.js";
import { FLOAT_OPTIONS, GENERATION_FIELDS, LANGUAGE_CODE, LANGUAGE_FIELDS, MAX_LANGUAGES, snakeCase,
  TARGET_TOKEN } from "../src/manifest_records.js";
import { DECODING_DEFAULTS } from "../src/options.js";
import { SPECIAL_ROLES } from "../src/tokenizer.js";
import { runPython } from "./python.js";

let py;
before(async () => {
  [py] = await runPython([{ op: "schema" }]);
});

test("format_version: the versions read and the decoder step contract of each", () => {
  assert.deepEqual(READ_FORMAT_VERSIONS, py.read_format_versions);
  for (const v of READ_FORMAT_VERSIONS) assert.equal(decoderFormat(v), py.decoder_format[v], `format_version ${v}`);
  assert.equal(manifest.FORMAT, py.format);
  assert.equal(manifest.MANIFEST, py.manifest);
  assert.equal(manifest.REEXPORT, py.reexport);
});

test("ModelConfig: field names and kinds in Python's order, choices, ranges, the format-3 fields' defaults", () => {
  assert.deepEqual(Object.entries(CONFIG_FIELDS), Object.entries(py.config_fields));
  assert.deepEqual(CHOICES, py.choices);
  assert.deepEqual(RANGES, py.ranges);
  assert.deepEqual(FORMAT_3_DEFAULTS, py.format_3_defaults);
});

test("manifest limits, file name and version patterns, variant statuses, special roles", () => {
  for (const [name, value] of Object.entries(py.limits)) assert.equal(manifest[name], value, name);
  for (const name of ["SHA256", "FILE_NAME", "VERSION"]) {
    assert.equal(manifest[name].source, `^${py.patterns[name]}$`, name); // Python fullmatches
    assert.equal(manifest[name].flags, "", name);
  }
  assert.deepEqual(manifest.UNCHECKED, py.unchecked);
  assert.deepEqual(manifest.STATUSES, py.statuses);
  assert.deepEqual(SPECIAL_ROLES, py.special_roles);
});

test("languages: the fields, MAX_LANGUAGES, LANGUAGE_CODE, TARGET_TOKEN", () => {
  assert.deepEqual(LANGUAGE_FIELDS, py.language_fields);
  assert.equal(MAX_LANGUAGES, py.max_languages);
  assert.equal(LANGUAGE_CODE, py.patterns.LANGUAGE_CODE);
  assert.deepEqual(TARGET_TOKEN, py.target_token);
});

test("generation: GENERATION_FIELDS, the float options, and the decoding options' names and defaults", () => {
  assert.deepEqual(GENERATION_FIELDS, py.generation_fields);
  assert.deepEqual(FLOAT_OPTIONS, py.float_options);
  const js = Object.fromEntries(Object.entries(DECODING_DEFAULTS).map(([k, v]) => [snakeCase(k), v]));
  assert.deepEqual(js, py.decoding_defaults);
});

test("external data: MAX_DATA_BYTES, the variant field, the external_data keys, the data types and their sizes", () => {
  assert.equal(manifest.MAX_DATA_BYTES, py.limits.MAX_DATA_BYTES);
  assert.equal(FIELD, py.external_data.field);
  assert.deepEqual(KEYS, py.external_data.keys);
  assert.deepEqual(DTYPES, py.external_data.dtypes);
  assert.equal(NUMBER.source, `^${py.external_data.number}$`); // Python fullmatches (re.ASCII: JS's \d is ASCII)
  assert.equal(NUMBER.flags, "");
});
