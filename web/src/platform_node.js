// Node's side of reading a package: a folder on disk (node:fs), SHA-256 by node:crypto, onnxruntime-node.
// As runtime/package/manifest.py: every file of the package is a regular file in the folder (a symbolic link could
// point anywhere on the disk, a FIFO or device could block or never end), opened without following links,
// checked again on the open descriptor, and read once up to a limit.
import { createHash } from "node:crypto";
import { constants as bufferConstants } from "node:buffer";
import { constants, promises as fs } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as ort from "onnxruntime-node";
import { ModelPackageError } from "./errors.js";

const REEXPORT = "re-export the model with `seq2onnx export`";
const OPEN_FLAGS = constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0);
// what a killed `seq2onnx export` leaves beside OUT_DIR (export/package.py)
const EXPORT_LEFTOVER = /^\.(?<name>.+)\.(?<kind>partial|old)-\d+-/;
// onnxruntime's own log of a session: fatal only. Its warnings and errors quote the graph's names raw (a hostile graph's
// initializer name can hold escape sequences that retitle or clear the terminal). What matters of them reaches the
// caller as the error that session creation throws, which engine.js reports in one printable line (\xNN escapes).
export const LOG_SEVERITY = 4;

async function checkRegular(file, missing) {
  let st;
  try {
    st = await fs.lstat(file);
  } catch (e) {
    if (e.code === "ENOENT" || e.code === "ENOTDIR") throw new ModelPackageError(missing);
    throw new ModelPackageError(`${file} cannot be read (${e.message}); copy the package again or ${REEXPORT}`);
  }
  if (st.isSymbolicLink()) {
    throw new ModelPackageError(`${file} is a symbolic link: the runtime reads nothing outside the package folder; copy ` +
      `the files themselves into it (cp -L), or ${REEXPORT}`);
  }
  if (!st.isFile()) throw new ModelPackageError(`${file} is not a regular file; copy the package again or ${REEXPORT}`);
  return st;
}

/** A sentence about what an interrupted `seq2onnx export` left at or beside `root`, or "" (runtime/package/manifest.py). */
async function interruptedExport(root) {
  const m = EXPORT_LEFTOVER.exec(path.basename(root));
  if (m && m.groups.kind === "partial") {
    return `${root} is the unfinished staging folder of an interrupted \`seq2onnx export\` to ` +
      `${path.join(path.dirname(root), m.groups.name)}: run that export again (it removes this folder)`;
  }
  let entries;
  try {
    await fs.lstat(root);
    return "";
  } catch {
    try {
      entries = (await fs.readdir(path.dirname(root), { withFileTypes: true })).sort((a, b) => (a.name < b.name ? -1 : 1));
    } catch {
      return "";
    }
  }
  const left = {};
  for (const entry of entries) {
    const e = EXPORT_LEFTOVER.exec(entry.name);
    if (e && e.groups.name === path.basename(root) && entry.isDirectory()) left[e.groups.kind] ??= entry.name;
  }
  if (left.old) {
    return `${root} does not exist: an export to it was interrupted and the previous package is left aside at ` +
      `${path.join(path.dirname(root), left.old)}: run the export again with --overwrite (it puts the previous package ` +
      `back first), or rename ${left.old} back to ${path.basename(root)}`;
  }
  if (left.partial) {
    return `${root} does not exist: an export to it was interrupted (its unfinished staging folder ${left.partial} is ` +
      `left): run the export again`;
  }
  return "";
}

export const nodePlatform = {
  name: "node",
  ort,
  outputsInto: true, // onnxruntime-node writes outputs into tensors the caller allocates (engine.js)

  /** The package folder, checked to be one. */
  async root(source) {
    if (typeof source !== "string" && !(source instanceof URL)) {
      throw new TypeError(`the model folder must be a path (a string), got ${typeof source}`);
    }
    const root = path.resolve(source instanceof URL ? fileURLToPath(source) : source);
    const interrupted = await interruptedExport(root);
    if (interrupted) throw new ModelPackageError(interrupted);
    let st = null;
    try {
      st = await fs.stat(root);
    } catch {}
    if (!st?.isDirectory()) {
      throw new ModelPackageError(`${root} ${st ? "is not a folder" : "does not exist"}: pass the folder written by ` +
        "`seq2onnx export`");
    }
    return root;
  },

  describe(root, name) {
    return name === undefined ? root : path.join(root, name);
  },

  /** Size of a listed file, which must be a regular file in the folder. */
  async fileSize(root, name, missing) {
    return (await checkRegular(path.join(root, name), missing)).size;
  },

  /** At most limit + 1 bytes of a regular file of the folder. */
  async readFile(root, name, limit, missing) {
    const file = path.join(root, name);
    await checkRegular(file, missing);
    if (limit + 1 > bufferConstants.MAX_LENGTH) { // a data file of a big model (external_data.js) past Node's buffers
      throw new ModelPackageError(`${file} has ${limit} bytes, more than one Node buffer holds ` +
        `(${bufferConstants.MAX_LENGTH - 1}): the JS runtime cannot load this package; use the Python runtime`);
    }
    let handle;
    try {
      handle = await fs.open(file, OPEN_FLAGS);
    } catch (e) {
      throw new ModelPackageError(`${file} cannot be read (${e.code ?? e.message}); copy the package again or ${REEXPORT}`);
    }
    try {
      if (!(await handle.stat()).isFile()) {
        throw new ModelPackageError(`${file} is not a regular file; copy the package again or ${REEXPORT}`);
      }
      const buffer = Buffer.alloc(limit + 1);
      let filled = 0;
      while (filled < buffer.length) {
        const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, null);
        if (bytesRead === 0) break;
        filled += bytesRead;
      }
      return new Uint8Array(buffer.buffer, buffer.byteOffset, filled);
    } finally {
      await handle.close();
    }
  },

  async sha256(bytes) {
    return createHash("sha256").update(bytes).digest("hex");
  },

  /** onnxruntime-node session options for the Translator's thread options; spinning false: the session's idle
   * intra-op threads sleep at once (engine.js SPINNING). */
  sessionOptions({ intraThreads = 0, interThreads = 1, spinning = true } = {}) {
    const options = { executionProviders: ["cpu"], graphOptimizationLevel: "all", logSeverityLevel: LOG_SEVERITY,
      executionMode: interThreads > 1 ? "parallel" : "sequential", interOpNumThreads: interThreads };
    if (intraThreads > 0) options.intraOpNumThreads = intraThreads;
    if (!spinning) options.extra = { session: { intra_op: { allow_spinning: "0" } } };
    return options;
  },

  cpuCount() {
    return os.availableParallelism();
  },
};
