// The browser's side of reading a package: files fetched from a URL (the package folder served as it is),
// SHA-256 by Web Crypto, onnxruntime-web (WASM). A file is fetched once; its bytes are hashed and then used.
// "Present and of its size" for files that are not loaded (the other variant, README.md) is asked of the
// server with HEAD requests: a missing file is refused, and a Content-Length that differs from the manifest.
import * as ort from "onnxruntime-web";
import { ModelPackageError } from "./errors.js";

const REEXPORT = "re-export the model with `seq2onnx export`";

function urlOf(root, name) {
  return new URL(name, `${root}/`).href;
}

async function fetchOk(url, init, missing) {
  let response;
  try {
    response = await fetch(url, { ...init, redirect: "error", cache: "no-cache" });
  } catch (e) {
    throw new ModelPackageError(`${url} cannot be fetched (${e.message}); check the URL and the server`);
  }
  if (response.status === 404) throw new ModelPackageError(missing);
  if (!response.ok) throw new ModelPackageError(`${url} cannot be fetched (HTTP ${response.status}); check the URL and the server`);
  return response;
}

export const browserPlatform = {
  name: "browser",
  ort,

  async root(source) {
    const href = new URL(String(source), globalThis.location?.href).href;
    return href.replace(/\/+$/, "");
  },

  describe(root, name) {
    return name === undefined ? root : urlOf(root, name);
  },

  async fileSize(root, name, missing) {
    const response = await fetchOk(urlOf(root, name), { method: "HEAD" }, missing);
    const length = response.headers.get("Content-Length");
    const encoded = response.headers.get("Content-Encoding");
    return length !== null && !encoded ? Number(length) : null;
  },

  /** At most limit + 1 bytes of the file (the rest of a longer body is not read). */
  async readFile(root, name, limit, missing) {
    const response = await fetchOk(urlOf(root, name), {}, missing);
    const reader = response.body.getReader();
    const chunks = [];
    let total = 0;
    while (total <= limit) {
      const { value, done } = await reader.read();
      if (done) break;
      chunks.push(value);
      total += value.length;
    }
    if (total > limit) await reader.cancel();
    const out = new Uint8Array(Math.min(total, limit + 1));
    let offset = 0;
    for (const chunk of chunks) {
      const part = chunk.subarray(0, out.length - offset);
      out.set(part, offset);
      offset += part.length;
      if (offset === out.length) break;
    }
    return out;
  },

  async sha256(bytes) {
    const digest = await globalThis.crypto.subtle.digest("SHA-256", bytes);
    return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
  },

  sessionOptions() {
    return { executionProviders: ["wasm"], graphOptimizationLevel: "all", logSeverityLevel: 4 }; // as platform_node.js
  },

  cpuCount() {
    return Math.max(1, globalThis.navigator?.hardwareConcurrency ?? 1);
  },
};


