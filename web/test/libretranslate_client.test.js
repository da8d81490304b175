// npm `libretranslate` (1.0.1, a devDependency) against `seq2onnx serve numbers-en-de`, a real server started here
// with SEQ2ONNX_PYTHON's interpreter on a free 127.0.0.1 port. What the package sends (its dist/translate.js):
// GET {apiurl}/languages and checks that source (default "auto") and target are among the codes (else a TypeError),
// then POST {apiurl}/translate with a JSON body {q, source, target, format: "text", apiKey} and returns the
// answer's translatedText (undefined for an error: it reads no status). Its key travels as "apiKey", which
// LibreTranslate's server ignores; ours takes it when api_key is absent (runtime/serve/libretranslate.py), so the
// package works against a server that needs a key. The translations are compared with the same server's
// /v1/translate (tests/runtime/serve/test_serve.py holds /v1 equal to Translator.translate_batch).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { translate } from "libretranslate";
import { pythonPath } from "./python.js";

const KEY = "npm-client-key";
const dir = mkdtempSync(path.join(tmpdir(), "seq2onnx-web-lt-"));
let server, apiurl, exited;
const log = [];

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.on("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

before(async () => {
  const port = await freePort();
  apiurl = `http://127.0.0.1:${port}`;
  const keys = path.join(dir, "keys");
  writeFileSync(keys, `${KEY}\n`);
  server = spawn(pythonPath(), ["-m", "seq2onnx.runtime.cli", "serve", "numbers-en-de", "--port", String(port),
    "--log-level", "warning", "--api-keys", keys], { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
  server.stdout.on("data", (d) => log.push(d));
  server.stderr.on("data", (d) => log.push(d));
  exited = new Promise((resolve) => server.on("exit", (code, signal) => resolve({ code, signal })));
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (server.exitCode !== null) throw new Error(`the server exited ${server.exitCode}: ${Buffer.concat(log)}`);
    try {
      if ((await fetch(`${apiurl}/ready`)).status === 200) return;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) throw new Error(`the server did not get ready: ${Buffer.concat(log)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
});

after(() => {
  if (server && server.exitCode === null && server.signalCode === null) server.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

/** The server's own API: texts -> the best hypothesis of each. */
async function v1(texts) {
  const response = await fetch(`${apiurl}/v1/translate`, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ texts, api_key: KEY }),
  });
  assert.equal(response.status, 200, await response.clone().text());
  return (await response.json()).results.map((r) => r.hypotheses[0]);
}

test("translates a text and a list as /v1/translate does, with the package's apiKey", async () => {
  const texts = ["twenty three", "one hundred and five"];
  const want = await v1(texts);
  assert.equal(want[0], "dreiundzwanzig"); // the shipped model's answer: not an empty or echoed string
  assert.equal(await translate({ query: texts[0], source: "en", target: "de", apiurl, apiKey: KEY }), want[0]);
  assert.deepEqual(await translate({ query: texts, source: "en", target: "de", apiurl, apiKey: KEY }), want);
  // no source: the package sends "auto", and the server detects each text's language (English here)
  assert.equal(await translate({ query: texts[1], target: "de", apiurl, apiKey: KEY }), want[1]);
});

test("the key is checked, and the package reads the server's languages", async () => {
  // a wrong key is refused (403): the package returns the answer's missing translatedText
  assert.equal(await translate({ query: "seven", source: "en", target: "de", apiurl, apiKey: "wrong" }), undefined);
  await assert.rejects(translate({ query: "seven", source: "en", target: "fr", apiurl, apiKey: KEY }),
    { name: "TypeError", message: /not found/ });
});

test("a text of several paragraphs keeps its layout: its sentences translated one by one", async () => {
  // q is a document (runtime/documents/text.py): paragraphs, a blank line, a list marker, sentences split
  const [seven, nine, twelve] = await v1(["seven.", "nine.", "twelve."]);
  const doc = "seven. nine.\n\n- twelve.\n  nine.";
  assert.equal(await translate({ query: doc, source: "en", target: "de", apiurl, apiKey: KEY }),
    `${seven} ${nine}\n\n- ${twelve}\n  ${nine}`);
});

test("SIGTERM stops the server with exit status 0", async () => {
  server.kill("SIGTERM");
  assert.deepEqual(await exited, { code: 0, signal: null }, Buffer.concat(log).toString());
});
