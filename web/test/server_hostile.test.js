// The demo server against what an attacker tried: symbolic links out of a served folder, a foreign Host header (DNS
// rebinding), and its command line: a bad --port and a port in use are one line and an exit code, never a stack trace.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startServer } from "../demo/server.js";
import { WEB_DIR } from "./python.js";

const work = mkdtempSync(path.join(tmpdir(), "seq2onnx-web-server-"));
const served = path.join(work, "served");
const outside = path.join(work, "outside");
let srv, port;

before(async () => {
  mkdirSync(path.join(served, "pkg"), { recursive: true });
  mkdirSync(outside);
  writeFileSync(path.join(served, "pkg", "model.json"), "{\"inside\": true}\n");
  writeFileSync(path.join(outside, "secret.txt"), "secret\n");
  symlinkSync(outside, path.join(served, "linked-folder")); // the attacker's: a folder link inside the served folder
  symlinkSync("/etc", path.join(served, "etc"));
  symlinkSync(path.join(outside, "secret.txt"), path.join(served, "pkg", "secret-link.json"));
  symlinkSync(path.join(served, "pkg", "model.json"), path.join(served, "inside-link.json")); // stays inside: served
  srv = await startServer({ mounts: { "/t/": served } });
  port = srv.server.address().port;
});
after(async () => {
  await srv.close();
  rmSync(work, { recursive: true, force: true });
});

/** GET `p` with the Host header `host` (null: none) -> [status, body]. (fetch sets Host itself; http.request lets a
 * test lie.) */
function get(p, host = `127.0.0.1:${port}`) {
  return new Promise((resolve, reject) => {
    const headers = host === null ? {} : { Host: host };
    const req = http.request({ host: "127.0.0.1", port, path: p, headers, setHost: false }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve([res.statusCode, Buffer.concat(chunks).toString()]));
    });
    req.on("error", reject);
    req.end();
  });
}

test("a symbolic link that leads out of a served folder serves nothing", async () => {
  for (const p of ["/t/linked-folder/secret.txt", "/t/etc/passwd", "/t/etc/hostname", "/t/pkg/secret-link.json"]) {
    const [status, body] = await get(p);
    assert.equal(status, 404, `${p}: ${body}`);
    assert.ok(!body.includes("secret") && !body.includes("root:"), p);
  }
});

test("a file inside the served folder is served, through a link that stays inside too", async () => {
  assert.deepEqual(await get("/t/pkg/model.json"), [200, "{\"inside\": true}\n"]);
  assert.deepEqual(await get("/t/inside-link.json"), [200, "{\"inside\": true}\n"]);
});

test("only the host names it listens on: a rebound DNS name gets nothing", async () => {
  for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LOCALHOST:${port}`, `[::1]:${port}`]) {
    assert.equal((await get("/t/pkg/model.json", host))[0], 200, host);
  }
  for (const host of [`evil.example:${port}`, "evil.example", "127.0.0.1", `127.0.0.1:${port + 1}`, `localhost.evil.example:${port}`,
    `127.0.0.1:${port}.evil.example`, null]) {
    const [status, body] = await get("/t/pkg/model.json", host);
    assert.equal(status, host === null ? 400 : 421, `Host ${host}`); // no Host at all: Node's own 400
    assert.ok(!body.includes("inside"), `Host ${host}`);
  }
});

/** A port that was free a moment ago. */
function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port: free } = s.address();
      s.close(() => resolve(free));
    });
  });
}

function runServer(args) {
  return spawnSync(process.execPath, ["demo/server.js", ...args], { cwd: WEB_DIR, encoding: "utf8", timeout: 30_000 });
}

function assertOneLine(run, code, pattern) {
  assert.equal(run.status, code, run.stderr);
  const lines = run.stderr.trim().split("\n");
  assert.equal(lines.length, 1, run.stderr);
  assert.match(lines[0], pattern);
  assert.ok(!/\n\s+at /.test(run.stderr) && !run.stderr.includes("node:internal"), "a stack trace");
}

test("a bad --port is one line and exit 2", () => {
  assertOneLine(runServer(["--port", "abc"]), 2, /^seq2onnx demo: --port must be a port number in \[0, 65535\] \(0: any free port\), got "abc"$/);
  assertOneLine(runServer(["--port", "70000"]), 2, /--port must be a port number in \[0, 65535\].*got "70000"/);
  assertOneLine(runServer(["--port", "-1"]), 2, /^seq2onnx demo: /);
  assertOneLine(runServer(["--port"]), 2, /^seq2onnx demo: Option '--port <value>' argument missing; usage: node demo\/server\.js/);
  assertOneLine(runServer(["--prot", "80"]), 2, /^seq2onnx demo: Unknown option '--prot'; usage: node demo\/server\.js/);
});

test("a second server on the same port is one line and exit 1; the first goes on serving", async () => {
  const free = await freePort();
  const first = spawn(process.execPath, ["demo/server.js", "--port", String(free)], { cwd: WEB_DIR, stdio: ["ignore", "pipe", "pipe"] });
  try {
    const line = await new Promise((resolve, reject) => {
      let out = "";
      first.stdout.on("data", (d) => {
        out += d;
        if (out.includes("\n")) resolve(out);
      });
      first.on("exit", (code) => reject(new Error(`the first server exited (${code})`)));
    });
    assert.match(line, new RegExp(`^seq2onnx demo: http://127\\.0\\.0\\.1:${free}/web/demo/`));
    const second = runServer(["--port", String(free)]);
    assertOneLine(second, 1, new RegExp(`^seq2onnx demo: port ${free} on 127\\.0\\.0\\.1 is in use \\(is a demo server already running\\?\\): stop that one, or pass --port N$`));
    const page = await fetch(`http://127.0.0.1:${free}/web/demo/`);
    assert.equal(page.status, 200);
  } finally {
    first.kill();
  }
});
