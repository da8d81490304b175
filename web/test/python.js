// Runs test/python_reference.py under the Python interpreter that has the repository installed: the Python
// runtime's answers, computed in the same test run (never stored). SEQ2ONNX_PYTHON names the interpreter;
// default: ../.venv/bin/python relative to web/ (the repository's dev venv, `make install-dev`).
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const WEB_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const REPO_DIR = path.resolve(WEB_DIR, "..");
export const MODEL_DIR = path.join(REPO_DIR, "models", "numbers-en-de");
// the shipped model as exported before cross K/V once per sentence (docs/CONTRACTS.md): a copy per row
export const EARLIER_CONTRACT = path.join(REPO_DIR, "tests", "data", "numbers-en-de-earlier-contract");
const SCRIPT = path.join(WEB_DIR, "test", "python_reference.py");

export function pythonPath() {
  const python = process.env.SEQ2ONNX_PYTHON || path.join(REPO_DIR, ".venv", "bin", "python");
  if (!existsSync(python)) {
    throw new Error(`no Python interpreter at ${python}: set SEQ2ONNX_PYTHON to a python that has the repository ` +
      `installed (make install-dev creates ${path.join(REPO_DIR, ".venv")})`);
  }
  return python;
}

/** jobs (see python_reference.py) -> one result per job. */
export function runPython(jobs, { timeoutMs = 300_000 } = {}) {
  const python = pythonPath();
  return new Promise((resolve, reject) => {
    const child = spawn(python, [SCRIPT], { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, PYTHONWARNINGS: "ignore" } });
    const out = [], err = [];
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.stdout.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    child.on("error", (e) => { clearTimeout(timer); reject(e); });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      if (code !== 0) {
        const tail = Buffer.concat(err).toString().trim().split("\n").slice(-5).join("\n");
        reject(new Error(`${python} ${SCRIPT} failed (${signal ?? `exit ${code}`}):\n${tail}`));
        return;
      }
      resolve(JSON.parse(Buffer.concat(out).toString()).results);
    });
    // NaN and +-Infinity as Python's json reads them (JSON.stringify would write null)
    const special = (k, v) => (typeof v === "number" && !Number.isFinite(v) ? `__${v}__` : v);
    child.stdin.end(JSON.stringify({ jobs }, special).replace(/"__(NaN|Infinity|-Infinity)__"/g, "$1"));
  });
}

/** {beamSize: 4, maxLengthB: null} -> {beam_size: 4, max_length_b: null}: the Python runtime's option names. */
export function pythonOptions(options) {
  return Object.fromEntries(Object.entries(options).map(([k, v]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), v]));
}

/** Texts the equality tests translate: each number in the given forms (training/numbers.py FORMS). */
export async function numberTexts(numbers, forms) {
  const [{ texts }] = await runPython([{ op: "numbers", numbers, forms }]);
  return texts;
}

// Lines outside the model's domain: other languages, odd Unicode, literal special tokens, whitespace of every
// kind Python's str.isspace() knows (blank: the empty translation) and some it does not (translated).
export const ODD_LINES = [
  "Hello world", "The quick brown fox jumps over the lazy dog.", "dreihundertzweiundvierzig", "ÄÖÜ äöü ß",
  "😀 👩‍👩‍👧", "ΟΔΟΣ", "İstanbul", "１２３", "٣٤٥", "½ ² Ⅻ", "</s> <pad> <s> <unk>", "one </s> two", "-12,345.67",
  "12345678901234567890", "seven seven seven seven seven seven", "a\u0000b", "e\u0301", "x\u200by",
  "", " ", "\t\n", "\u3000", "\u00a0\u2003", "\x1c\x1d\x1e\x1f", "\x85", "\ufeff", "\u200b", "nine\u2028hundred",
];
