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
    child.stdin.end(JSON.stringify({ jobs }));
  });
}
