// The npm package as a user gets it: `npm pack` gives a tarball of src/, README, LICENSE and package.json only;
// `npm install <tarball>` in an empty folder gives an `import ... from "seq2onnx"` that translates with the shipped
// model. Dependencies come from npm's cache where it has them (--prefer-offline), as `npm ci` left them.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { Translator } from "../src/index.js";
import { assertSameTranslations } from "./compare.js";
import { MODEL_DIR, pythonOptions, REPO_DIR, WEB_DIR } from "./python.js";

const run = promisify(execFile);
// `npm test` runs us with its own package's settings in the environment (npm_config_local_prefix=web/, ...):
// the npm we start in the consumer's folder must see that folder's, as a user's shell would
const cleanEnv = Object.fromEntries(Object.entries(process.env)
  .filter(([k]) => !/^npm_(package_|lifecycle_|command$|config_local_prefix$)/.test(k)));
const npm = (args, cwd) => run("npm", args, { cwd, env: cleanEnv, maxBuffer: 64 << 20, timeout: 240_000 });

const listFiles = (dir, base = dir) => readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
  e.isDirectory() ? listFiles(path.join(dir, e.name), base) : [path.relative(base, path.join(dir, e.name)).split(path.sep).join("/")]);

describe("the npm package", () => {
  let tmp, packed;
  before(async () => {
    tmp = mkdtempSync(path.join(tmpdir(), "seq2onnx-npm-"));
    const { stdout } = await npm(["pack", "--json", "--pack-destination", tmp], WEB_DIR);
    [packed] = JSON.parse(stdout);
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  test("npm pack: src/, README.md, LICENSE and package.json, nothing else", () => {
    const pkg = JSON.parse(readFileSync(path.join(WEB_DIR, "package.json"), "utf8"));
    assert.equal(pkg.private, undefined, "package.json says private: npm publish would refuse it");
    const files = packed.files.map((f) => f.path).sort();
    const expected = ["LICENSE", "README.md", "package.json", ...listFiles(path.join(WEB_DIR, "src")).map((f) => `src/${f}`)].sort();
    assert.deepEqual(files, expected);
    // every entry point package.json names is in the tarball
    for (const target of Object.values(pkg.exports["."])) assert.ok(files.includes(path.posix.normalize(target)), target);
    // web/LICENSE is the repository's, copied so that the tarball carries it
    assert.deepEqual(readFileSync(path.join(WEB_DIR, "LICENSE")), readFileSync(path.join(REPO_DIR, "LICENSE")));
  });

  test("npm install <tarball> in an empty folder, then import from \"seq2onnx\" translates with the shipped model",
    { timeout: 300_000 }, async () => {
      const app = path.join(tmp, "app");
      mkdirSync(app);
      writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
      // --ignore-scripts: onnxruntime-node's install script would fetch its CUDA provider from NuGet (web/.npmrc)
      await npm(["install", "--prefer-offline", "--ignore-scripts", "--no-audit", "--no-fund",
        path.join(tmp, packed.filename)], app);
      writeFileSync(path.join(app, "translate.mjs"), [
        'import { Translator } from "seq2onnx";',
        "const [model, options] = [process.argv[2], JSON.parse(process.argv[3])];",
        "const out = { resolved: import.meta.resolve(\"seq2onnx\"), results: {} };",
        "for (const computeType of [\"float32\", \"int8\"]) {",
        "  const t = await Translator.load(model, { computeType, intraThreads: 1 });",
        "  out.results[computeType] = await t.translateBatch(JSON.parse(process.argv[4]), options);",
        "  await t.release();",
        "}",
        "console.log(JSON.stringify(out));",
      ].join("\n"));
      const texts = ["forty-two", "three hundred and one", "999999", "hello"];
      const options = { beamSize: 4, numHypotheses: 2, returnScores: true };
      const { stdout } = await run(process.execPath, ["translate.mjs", MODEL_DIR, JSON.stringify(options), JSON.stringify(texts)],
        { cwd: app, env: cleanEnv, maxBuffer: 64 << 20, timeout: 120_000 });
      const out = JSON.parse(stdout);
      // the installed copy answered, not this checkout's src/
      assert.equal(out.resolved, pathToFileURL(path.join(realpathSync(app), "node_modules", "seq2onnx", "src", "index.js")).href);
      for (const computeType of ["float32", "int8"]) {
        // the checkout's answers: the same code on the onnxruntime-node version package.json pins exactly, on the
        // same machine and thread count, so the same arithmetic; scores are held to compare.js's bound all the same
        const t = await Translator.load(MODEL_DIR, { computeType, intraThreads: 1 });
        const here = await t.translateBatch(texts, options);
        await t.release();
        const installed = out.results[computeType];
        assert.ok(installed.every((r) => r.hypotheses.length === 2 && r.hypotheses.every((h) => typeof h === "string")));
        await assertSameTranslations(installed, here.map((r) => ({ ...r, token_ids: r.tokenIds, normalized_scores: r.normalizedScores,
          source_unknown_tokens: r.sourceUnknownTokens })), texts,
        { model: MODEL_DIR, computeType, options: pythonOptions({ beamSize: 4, numHypotheses: 2 }), label: `installed package, ${computeType}` });
      }
    });
});
