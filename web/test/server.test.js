// The demo's static server: 127.0.0.1 only, the page's folders only, HEAD and gzip, and it stops when asked.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import zlib from "node:zlib";
import { startServer } from "../demo/server.js";
import { MODEL_DIR } from "./python.js";

let srv;
before(async () => (srv = await startServer()));
after(async () => srv.close());

test("binds 127.0.0.1 only", () => {
  assert.equal(srv.server.address().address, "127.0.0.1");
  assert.match(srv.url, /^http:\/\/127\.0\.0\.1:\d+$/);
});

test("serves the page, the package's code and the model files as they are", async () => {
  const page = await fetch(`${srv.url}/web/demo/`);
  assert.equal(page.status, 200);
  assert.match(await page.text(), /English numbers → German/);
  const encoder = await fetch(`${srv.url}/models/numbers-en-de/encoder.int8.onnx`);
  assert.equal(encoder.headers.get("content-encoding"), null);
  assert.deepEqual(Buffer.from(await encoder.arrayBuffer()), readFileSync(path.join(MODEL_DIR, "encoder.int8.onnx")));
  const head = await fetch(`${srv.url}/models/numbers-en-de/README.md`, { method: "HEAD" });
  assert.equal(Number(head.headers.get("content-length")), readFileSync(path.join(MODEL_DIR, "README.md")).length);
  assert.equal(head.headers.get("cross-origin-embedder-policy"), "require-corp");
});

test("compresses code for clients that accept gzip", async () => {
  const response = await fetch(`${srv.url}/web/src/decoding.js`, { headers: { "Accept-Encoding": "gzip" } });
  assert.equal(response.status, 200); // fetch inflates the body itself
  assert.equal(await response.text(), readFileSync(new URL("../src/decoding.js", import.meta.url), "utf8"));
  const sent = srv.stats.get("/web/src/decoding.js").bytes;
  assert.equal(sent, zlib.gzipSync(readFileSync(new URL("../src/decoding.js", import.meta.url)), { level: 6 }).length);
});

test("nothing outside the page's folders", async () => {
  for (const p of ["/web/package.json", "/web/test/python_reference.py", "/README.md", "/runtime/translator.py",
    "/web/node_modules/onnxruntime-node/package.json", "/web/demo/../../README.md", "/web/demo/%2e%2e/%2e%2e/README.md",
    "/models/../Makefile", "/etc/passwd", "/web/demo/missing.js"]) {
    const response = await fetch(`${srv.url}${p}`);
    assert.equal(response.status, 404, p);
  }
  assert.equal((await fetch(`${srv.url}/web/demo/`, { method: "POST" })).status, 405);
});
