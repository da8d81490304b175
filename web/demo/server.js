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
// What it serves is a real file inside one of those folders once every symbolic link is resolved (a link in models/
// to /etc cannot lead out), and only to requests whose Host is the address it listens on (localhost, 127.0.0.1 or
// [::1], with its port): a web page whose DNS name is rebound to 127.0.0.1 gets nothing.
import { createReadStream, promises as fs } from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import zlib from "node:zlib";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const ALLOWED = ["web/demo/", "web/src/", "web/node_modules/onnxruntime-web/dist/",
  "web/node_modules/@huggingface/tokenizers/dist/", "models/"];
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
  ".css": "text/css", ".json": "application/json", ".wasm": "application/wasm", ".onnx": "application/octet-stream",
  ".md": "text/plain; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml" };
const COMPRESSED = new Set([".html", ".js", ".mjs", ".css", ".wasm", ".svg"]);
export const HOST = "127.0.0.1";
export const DEFAULT_PORT = 8019;
const LOOPBACK_NAMES = ["localhost", "127.0.0.1", "[::1]"];

/** The real path of a folder, with a trailing separator, or null where it does not exist. */
async function realFolder(dir) {
  try {
    return `${await fs.realpath(dir)}${path.sep}`;
  } catch {
    return null;
  }
}

/** The real path of `file` where it is a regular file inside the real folder `root`, else null. */
async function realFileInside(file, root) {
  let real;
  try {
    real = await fs.realpath(file);
  } catch {
    return null;
  }
  if (!real.startsWith(root)) return null;
  const st = await fs.stat(real).catch(() => null);
  return st?.isFile() ? { file: real, st } : null;
}

/** Start the server on 127.0.0.1:port (0: any free port) -> {server, url, stats, close()}.
 * stats: path -> {requests, bytes} of the bodies sent. mounts: {"/prefix/": folder} served besides. */
export async function startServer({ port = 0, log = false, mounts = {} } = {}) {
  const folders = [...ALLOWED.map((dir) => [`/${dir}`, path.join(REPO, dir)]),
    ...Object.entries(mounts).map(([prefix, dir]) => [prefix, path.resolve(dir)])];
  const roots = (await Promise.all(folders.map(async ([prefix, dir]) => [prefix, await realFolder(dir)])))
    .filter(([, dir]) => dir !== null);
  let hosts = new Set(); // the Host headers it answers: set once it listens (the port)
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
      url = new URL(req.url, `http://${HOST}`);
      if (!hosts.has(String(req.headers.host ?? "").toLowerCase())) return send(res, 421, "unknown host: use the address the server printed");
      if (req.method !== "GET" && req.method !== "HEAD") return send(res, 405, "method not allowed");
      if (url.pathname === "/" || url.pathname === "/web/demo") return redirect(res, "/web/demo/");
      const wanted = decodeURIComponent(url.pathname);
      const root = roots.find(([prefix]) => wanted.startsWith(prefix));
      if (!root || wanted.split("/").includes("..")) return send(res, 404, "not found");
      const rel = wanted.slice(root[0].length);
      const found = await realFileInside(path.resolve(root[1], rel.endsWith("/") || rel === "" ? `${rel}index.html` : rel), root[1]);
      if (found === null) return send(res, 404, "not found");
      const { file, st } = found;
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
    server.listen(port, HOST, resolve);
  });
  const { port: bound } = server.address();
  hosts = new Set(LOOPBACK_NAMES.flatMap((name) => [`${name}:${bound}`, ...(bound === 80 ? [name] : [])]));
  return {
    server,
    stats,
    url: `http://${HOST}:${bound}`,
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

/** `node demo/server.js [--port N] [--log]`: a bad argument is one line and exit 2; a port that cannot be had
 * (in use, not allowed) one line and exit 1. */
async function main(argv) {
  let values;
  try {
    ({ values } = parseArgs({ args: argv, options: { port: { type: "string" }, log: { type: "boolean" } } }));
  } catch (e) {
    return fail(2, `${e.message.split("\n")[0]}; usage: node demo/server.js [--port N] [--log]`);
  }
  const port = values.port === undefined ? DEFAULT_PORT : /^\d{1,5}$/.test(values.port) ? Number(values.port) : NaN;
  if (!(port >= 0 && port <= 65535)) {
    return fail(2, `--port must be a port number in [0, 65535] (0: any free port), got ${JSON.stringify(values.port)}`);
  }
  let url;
  try {
    ({ url } = await startServer({ port, log: values.log === true }));
  } catch (e) {
    const why = e.code === "EADDRINUSE" ? "is in use (is a demo server already running?): stop that one, or pass --port N"
      : `cannot be used (${e.code ?? e.message})`;
    return fail(1, `port ${port} on ${HOST} ${why}`);
  }
  console.log(`seq2onnx demo: ${url}/web/demo/  (${HOST} only; Ctrl-C stops it)`);
}

function fail(code, message) {
  console.error(`seq2onnx demo: ${message}`);
  process.exitCode = code;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main(process.argv.slice(2));
