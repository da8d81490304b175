// A tiny static server for the demo page, bound to 127.0.0.1 only: `npm run demo` (or `node demo/server.js
// [--port N]`). It serves, read-only, the few folders the page needs, and nothing else of the disk:
//   /web/demo/  /web/src/            the page and the package's code
//   /web/node_modules/onnxruntime-web/dist/, /web/node_modules/@huggingface/tokenizers/dist/
//   /models/                         the repository's model packages, as they are (not copied)
// Text, JS and WASM go gzip-compressed to clients that accept it (the model files as they are: int8 weights
// hardly compress, and the browser's package check compares their Content-Length with the manifest). Every
// response is counted by path (bytes on the wire), which is how bench.mjs measures the page's payload.
// Cross-origin isolation headers let onnxruntime-web use its threaded WASM where the machine has the cores.
// `mounts` (tests only) serves more folders under URL prefixes of their own.
import { createReadStream, promises as fs } from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import zlib from "node:zlib";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const ALLOWED = ["web/demo/", "web/src/", "web/node_modules/onnxruntime-web/dist/",
  "web/node_modules/@huggingface/tokenizers/dist/", "models/"];
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
  ".css": "text/css", ".json": "application/json", ".wasm": "application/wasm", ".onnx": "application/octet-stream",
  ".md": "text/plain; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml" };
const COMPRESSED = new Set([".html", ".js", ".mjs", ".css", ".wasm", ".svg"]);

/** Start the server on 127.0.0.1:port (0: any free port) -> {server, url, stats, close()}.
 * stats: path -> {requests, bytes} of the bodies sent. mounts: {"/prefix/": folder} served besides. */
export async function startServer({ port = 0, log = false, mounts = {} } = {}) {
  const roots = [...ALLOWED.map((dir) => [`/${dir}`, path.join(REPO, dir)]),
    ...Object.entries(mounts).map(([prefix, dir]) => [prefix, `${path.resolve(dir)}${path.sep}`])];
  const gzipCache = new Map(); // file -> {mtimeMs, data}
  const stats = new Map();
  const server = http.createServer(async (req, res) => {
    const count = (bytes) => {
      const s = stats.get(url.pathname) ?? { requests: 0, bytes: 0 };
      s.requests += 1;
      s.bytes += bytes;
      stats.set(url.pathname, s);
    };
    let url;
    try {
      url = new URL(req.url, "http://127.0.0.1");
      if (req.method !== "GET" && req.method !== "HEAD") return send(res, 405, "method not allowed");
      if (url.pathname === "/" || url.pathname === "/web/demo") return redirect(res, "/web/demo/");
      const wanted = decodeURIComponent(url.pathname);
      const root = roots.find(([prefix]) => wanted.startsWith(prefix));
      if (!root || wanted.split("/").includes("..")) return send(res, 404, "not found");
      const rel = wanted.slice(root[0].length);
      const file = path.resolve(root[1], rel.endsWith("/") || rel === "" ? `${rel}index.html` : rel);
      if (!file.startsWith(root[1])) return send(res, 404, "not found");
      const st = await fs.lstat(file).catch(() => null);
      if (!st?.isFile()) return send(res, 404, "not found");
      const ext = path.extname(file);
      const headers = { "Content-Type": TYPES[ext] ?? "application/octet-stream", "Cache-Control": "no-cache",
        "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp",
        "Cross-Origin-Resource-Policy": "same-origin" };
      if (COMPRESSED.has(ext) && /\bgzip\b/.test(req.headers["accept-encoding"] ?? "")) {
        let cached = gzipCache.get(file);
        if (!cached || cached.mtimeMs !== st.mtimeMs) {
          cached = { mtimeMs: st.mtimeMs, data: zlib.gzipSync(await fs.readFile(file), { level: 6 }) };
          gzipCache.set(file, cached);
        }
        res.writeHead(200, { ...headers, "Content-Encoding": "gzip", "Content-Length": cached.data.length, Vary: "Accept-Encoding" });
        count(req.method === "HEAD" ? 0 : cached.data.length);
        return res.end(req.method === "HEAD" ? undefined : cached.data);
      }
      res.writeHead(200, { ...headers, "Content-Length": st.size });
      count(req.method === "HEAD" ? 0 : st.size);
      if (req.method === "HEAD") return res.end();
      createReadStream(file).pipe(res);
    } catch (e) {
      send(res, 500, String(e.message));
    } finally {
      if (log) console.log(`${req.method} ${req.url} ${res.statusCode}`);
    }
  });
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  const { port: bound } = server.address();
  return {
    server,
    stats,
    url: `http://127.0.0.1:${bound}`,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

function send(res, status, text) {
  res.writeHead(status, { "Content-Type": "text/plain; charset=utf-8" });
  res.end(`${text}\n`);
}

function redirect(res, location) {
  res.writeHead(302, { Location: location });
  res.end();
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf("--port");
  const port = i > 0 ? Number(process.argv[i + 1]) : 8019;
  const { url } = await startServer({ port, log: process.argv.includes("--log") });
  console.log(`seq2onnx demo: ${url}/web/demo/  (127.0.0.1 only; Ctrl-C stops it)`);
}
