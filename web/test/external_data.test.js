// Packages whose graphs keep their weights in a data file beside them (ONNX external data; src/external_data.js,
// runtime/package/external_data.py), on the shipped model with every graph rewritten by the exporter's own writer
// (test/python_reference.py "external_data": export/graph_files.py save_graph, as `seq2onnx export --external-data`).
// The JS runtime translates it as the Python runtime does and exactly as the same model without external data, with
// onnxruntime reading no file; each hostile copy (a changed, truncated, missing or linked data file, a location outside
// the folder or of another graph, an offset past the end, a wrong length, a bad manifest field) is refused by JS with
// Python's own line, before onnxruntime sees the graph.
import assert from "node:assert/strict";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, statSync, symlinkSync, truncateSync, unlinkSync,
  writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { openEngine } from "../src/engine.js";
import { ExternalGraph } from "../src/external_data.js";
import { ModelPackageError, readPackage, Translator } from "../src/index.js";
import { externalTensors } from "../src/onnx_bytes.js";
import { nodePlatform } from "../src/platform_node.js";
import { assertSameTranslations } from "./compare.js";
import { MODEL_DIR, numberTexts, runPython } from "./python.js";

const work = mkdtempSync(path.join(tmpdir(), "seq2onnx-web-external-"));
const EXT = path.join(work, "ext");
const OPTIONS = { beamSize: 4, numHypotheses: 2 };
const PY_OPTIONS = { beam_size: 4, num_hypotheses: 2 };
const graphsOf = (v) => [v.encoder, v.decoder_step, ...(v.few_rows ? [v.few_rows.decoder_step] : [])];
const readManifest = (dir) => JSON.parse(readFileSync(path.join(dir, "manifest.json"), "utf8"));
const writeManifest = (dir, m) => writeFileSync(path.join(dir, "manifest.json"), JSON.stringify(m, null, 1));

// name -> [external_data job's "point" (Python rewrites the graph), compute type]: hostile graphs, listed anew
const POINTED = {
  "a location in the parent folder": [{ "encoder.int8.onnx": { location: "../outside/encoder.int8.onnx.data" } }, "int8"],
  "an absolute location": [{ "encoder.int8.onnx": { location: path.join(work, "outside", "encoder.int8.onnx.data") } }, "int8"],
  "another graph's data file": [{ "encoder.int8.onnx": { location: "encoder.onnx.data" } }, "int8"],
  "an offset past the end": [{ "decoder_step.int8.onnx": { offset: "99999999999" } }, "int8"],
  "an offset that is no number": [{ "decoder_step.onnx": { offset: "-1" } }, "float32"],
  "a length that is not the tensor's": [{ "encoder.onnx": { length: "4" } }, "float32"],
};
// name -> [edit of a copy of EXT (dir), compute type]: the data files and the manifest field
const EDITED = {
  "a changed data file": [(dir) => {
    const file = path.join(dir, "decoder_step.int8.onnx.data"), data = readFileSync(file);
    data[data.length >> 1] ^= 1;
    writeFileSync(file, data);
  }, "int8"],
  "a truncated data file": [(dir) => truncateSync(path.join(dir, "encoder.onnx.data"), statSync(path.join(dir, "encoder.onnx.data")).size - 1), "float32"],
  "a missing data file": [(dir) => unlinkSync(path.join(dir, "encoder.int8.onnx.data")), "int8"],
  "a data file that is a link": [(dir) => {
    const outside = path.join(work, "linked.data");
    renameSync(path.join(dir, "encoder.onnx.data"), outside);
    symlinkSync(outside, path.join(dir, "encoder.onnx.data"));
  }, "float32"],
  "no external_data field": [(dir) => {
    const m = readManifest(dir);
    delete m.variants.fp32.external_data;
    delete m.variants.int8.external_data;
    writeManifest(dir, m);
  }, "float32"],
  "external_data naming an unlisted file": [(dir) => {
    const m = readManifest(dir);
    m.variants.fp32.external_data["encoder.onnx"] = "nowhere.data";
    writeManifest(dir, m);
  }, "float32"],
  "external_data naming a graph as data": [(dir) => {
    const m = readManifest(dir);
    m.variants.fp32.external_data["encoder.onnx"] = "decoder_step.onnx";
    writeManifest(dir, m);
  }, "float32"],
  "external_data naming a file not a graph of the variant": [(dir) => {
    const m = readManifest(dir);
    m.variants.fp32.external_data["tokenizer.json"] = "encoder.onnx.data";
    writeManifest(dir, m);
  }, "float32"],
  "two data files for one graph": [(dir) => {
    const m = readManifest(dir);
    Object.assign(m.variants.int8, { encoder: "encoder.onnx", external_data: { ...m.variants.int8.external_data, "encoder.onnx": "encoder.int8.onnx.data" } });
    writeManifest(dir, m);
  }, "float32"],
  "external_data that is a list": [(dir) => {
    const m = readManifest(dir);
    m.variants.fp32.external_data = ["encoder.onnx.data"];
    writeManifest(dir, m);
  }, "float32"],
};

const dirs = {};
let python, texts, pyTranslations;

before(async () => {
  mkdirSync(path.join(work, "outside"));
  const pointed = Object.entries(POINTED);
  await runPython([{ op: "external_data", model: MODEL_DIR, out: EXT },
    ...pointed.map(([name, [point]], i) => ({ op: "external_data", model: MODEL_DIR, out: (dirs[name] = path.join(work, `pointed-${i}`)), point }))]);
  // the right bytes where onnxruntime would find them, were it let read the locations above
  cpSync(path.join(EXT, "encoder.int8.onnx.data"), path.join(work, "outside", "encoder.int8.onnx.data"));
  Object.entries(EDITED).forEach(([name, [edit]], i) => {
    dirs[name] = path.join(work, `edited-${i}`);
    cpSync(EXT, dirs[name], { recursive: true });
    edit(dirs[name]);
  });
  const hostile = { ...POINTED, ...EDITED };
  texts = [...(await numberTexts([7, 342, 1999, 80000, 123456], ["canonical", "digits"])), "", "Hello world"];
  const results = await runPython([
    ...Object.entries(hostile).map(([name, [, computeType]]) => ({ op: "load", model: dirs[name], compute_type: computeType })),
    ...["float32", "int8"].map((computeType) => ({ op: "translate", model: EXT, compute_type: computeType, texts, options: PY_OPTIONS })),
  ]);
  python = Object.fromEntries(Object.keys(hostile).map((name, i) => [name, results[i].error]));
  pyTranslations = { float32: results.at(-2).results, int8: results.at(-1).results };
});
after(() => rmSync(work, { recursive: true, force: true }));

test("every graph keeps its weights in its own data file, listed in 'files' and named in its variant's external_data", async () => {
  const manifest = readManifest(EXT);
  const pkg = await readPackage(nodePlatform, EXT);
  for (const [name, entry] of Object.entries(manifest.variants)) {
    const graphs = graphsOf(entry);
    assert.deepEqual(pkg.variants[name].externalData, Object.fromEntries(graphs.map((g) => [g, `${g}.data`])), name);
    for (const graph of graphs) {
      const tensors = externalTensors(readFileSync(path.join(EXT, graph)));
      assert.ok(tensors.length > 0 && tensors.every((t) => t.initializer), graph);
      assert.deepEqual(new Set(tensors.map((t) => new Map(t.entries).get("location"))), new Set([`${graph}.data`]), graph);
      assert.ok(Object.hasOwn(manifest.files, `${graph}.data`), graph);
      const read = await pkg.readGraph(graph);
      assert.ok(read instanceof ExternalGraph && read.weights.length === manifest.files[`${graph}.data`].bytes, graph);
    }
  }
});

for (const computeType of ["float32", "int8"]) {
  test(`${computeType}: translates as the Python runtime does, and exactly as the package without external data`, async () => {
    const [ext, shipped] = await Promise.all([EXT, MODEL_DIR].map((dir) => Translator.load(dir, { computeType, intraThreads: 1 })));
    try {
      const got = await ext.translateBatch(texts, { ...OPTIONS, returnScores: true });
      const want = await shipped.translateBatch(texts, { ...OPTIONS, returnScores: true });
      assert.deepEqual(got.map((r) => [r.hypotheses, r.tokenIds, r.scores]), want.map((r) => [r.hypotheses, r.tokenIds, r.scores]));
      await assertSameTranslations(got, pyTranslations[computeType], texts, { model: EXT, computeType, options: PY_OPTIONS,
        label: `external data ${computeType}` });
    } finally {
      await Promise.all([ext.release(), shipped.release()]);
    }
  });
}

test("onnxruntime reads no data file: it computes with the bytes the runtime read and checked, and copies them", async () => {
  const dir = path.join(work, "gone");
  cpSync(EXT, dir, { recursive: true });
  const pkg = await readPackage(nodePlatform, dir);
  const graphs = await pkg.readVariant("fp32");
  for (const name of Object.values(pkg.variants.fp32.externalData)) unlinkSync(path.join(dir, name)); // nowhere on disk now
  const files = [pkg.variants.fp32.encoder, pkg.variants.fp32.decoderStep];
  const engine = await openEngine(pkg, "fp32", async (file) => graphs[files.indexOf(file)],
    () => nodePlatform.sessionOptions({ intraThreads: 1 }));
  for (const graph of graphs) graph.weights.fill(0); // the sessions hold their own copy: the runtime lets go of these
  const translator = new Translator(pkg, "fp32", engine, () => {});
  try {
    assert.equal(await translator.translate("three hundred forty two"), "dreihundertzweiundvierzig");
  } finally {
    await translator.release();
  }
});

test("a variant's shared data file (what every export writes): read once for its graphs, translating as Python does", async () => {
  const dir = path.join(work, "shared");
  await runPython([{ op: "share_weights", model: MODEL_DIR, out: dir }]);
  const py = await runPython(["float32", "int8"].map((computeType) => ({ op: "translate", model: dir, compute_type: computeType, texts, options: PY_OPTIONS })));
  const manifest = readManifest(dir);
  assert.deepEqual(manifest.variants.fp32.external_data, { "encoder.onnx": "fp32.shared.data", "decoder_step.onnx": "fp32.shared.data" });
  const reads = [];
  const counting = { ...nodePlatform, readFile: (root, name, ...rest) => { reads.push(name); return nodePlatform.readFile(root, name, ...rest); } };
  const pkg = await readPackage(counting, dir);
  const [encoder, decoder] = await pkg.readVariant("fp32");
  assert.ok(encoder instanceof ExternalGraph && decoder.weights === encoder.weights, "one read's bytes for both graphs");
  assert.equal(reads.filter((name) => name === "fp32.shared.data").length, 1);
  pkg.releaseShared();
  for (const [k, computeType] of ["float32", "int8"].entries()) {
    const shared = await Translator.load(dir, { computeType, intraThreads: 1 });
    try {
      const got = await shared.translateBatch(texts, { ...OPTIONS, returnScores: true });
      await assertSameTranslations(got, py[k].results, texts, { model: dir, computeType, options: PY_OPTIONS,
        label: `shared weights ${computeType}` });
    } finally {
      await shared.release();
    }
  }
});

test("one graph's bytes at a time: each graph is read right before its session is built, after the previous one's", async () => {
  const events = [];
  const ort = { ...nodePlatform.ort, InferenceSession: { create: async (...args) => {
    const session = await nodePlatform.ort.InferenceSession.create(...args);
    events.push("session");
    return session;
  } } };
  const logging = { ...nodePlatform, ort, readFile: (root, name, ...rest) => {
    if (name.endsWith(".onnx") || name.endsWith(".data")) events.push(name);
    return nodePlatform.readFile(root, name, ...rest);
  } };
  const translator = await Translator.open(logging, MODEL_DIR, { computeType: "float32", intraThreads: 1 });
  try {
    const v = readManifest(MODEL_DIR).variants.fp32;
    assert.deepEqual(v.external_data, { [v.encoder]: "fp32.shared.data", [v.decoder_step]: "fp32.shared.data" });
    assert.deepEqual(events, [v.encoder, "fp32.shared.data", "session", v.decoder_step, "session"]);
    assert.equal(await translator.translate("three hundred forty two"), "dreihundertzweiundvierzig");
  } finally {
    await translator.release();
  }
});

for (const name of [...Object.keys(POINTED), ...Object.keys(EDITED)]) {
  test(`${name}: refused with the Python runtime's line`, async () => {
    const computeType = (POINTED[name] ?? EDITED[name])[1];
    assert.notEqual(python[name], null, `Python loads it`);
    await assert.rejects(Translator.load(dirs[name], { computeType, onWarning: () => {} }), (e) => {
      assert.ok(e instanceof ModelPackageError, `${e.name}: ${e.message}`);
      assert.equal(e.message, python[name]);
      return true;
    });
  });
}

test("the hostile verdicts name what is wrong (the Python lines the JS ones equal)", () => {
  assert.match(python["a location in the parent folder"], /names the external data file '\.\.\/outside\/encoder\.int8\.onnx\.data', but the manifest's data file for this graph is 'encoder\.int8\.onnx\.data'/);
  assert.match(python["an offset past the end"], /lies at bytes 99999999999\.\.\d+ of decoder_step\.int8\.onnx\.data, which has \d+: past its end/);
  assert.match(python["a changed data file"], /decoder_step\.int8\.onnx\.data: its SHA-256 does not match manifest\.json/);
  assert.match(python["a length that is not the tensor's"], /\(\d+ bytes\) but external_data length 4;/);
  assert.match(python["no external_data field"], /keeps weights in external data files, which the package's checksums do not cover/);
});

test("two bad graphs: the encoder's error, as Python reads it first, even when the decoder step's read fails first", async () => {
  // the package of "no external_data field": neither graph's external data is covered, so both reads fail; the
  // encoder's read is held until the decoder step's has failed
  let decoderFailed;
  const failed = new Promise((resolve) => { decoderFailed = resolve; });
  let hold = false;
  const held = { ...nodePlatform, readFile: async (root, name, ...rest) => {
    if (hold && name === "encoder.onnx") await failed;
    return nodePlatform.readFile(root, name, ...rest);
  } };
  const pkg = await readPackage(held, dirs["no external_data field"]);
  const readGraph = pkg.readGraph.bind(pkg);
  pkg.readGraph = (file, verify) => {
    const read = readGraph(file, verify);
    if (file === "decoder_step.onnx") read.catch((e) => decoderFailed(e));
    return read;
  };
  hold = true;
  const reading = pkg.readVariant("fp32");
  const decoderError = await failed;
  assert.match(decoderError.message, /^\S*decoder_step\.onnx keeps weights in external data files/);
  await assert.rejects(reading, (e) => {
    assert.equal(e.message, python["no external_data field"]);
    assert.match(e.message, /^\S*encoder\.onnx keeps weights/);
    return true;
  });
});
