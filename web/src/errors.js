// Errors meant for the user: one line naming the problem and the fix (runtime/errors.py).
// Bad option values are RangeErrors and bad argument types TypeErrors, as Python's ValueError / TypeError.

/** Bad input, a bad model folder, a bad option: the message names the problem and the fix. */
export class Seq2OnnxError extends Error {
  constructor(message) {
    super(message);
    this.name = "Seq2OnnxError";
  }
}

/** A model folder that cannot be loaded (missing file, bad checksum, unknown format...). */
export class ModelPackageError extends Seq2OnnxError {
  constructor(message) {
    super(message);
    this.name = "ModelPackageError";
  }
}

// C0, DEL and C1: the characters a terminal acts on (escape sequences, bell, carriage return, line breaks)
const CONTROL = /[\x00-\x1f\x7f-\x9f]/g;

/** `text` with every control character written as \xNN (runtime/errors.py printable): what a hostile graph puts in
 * onnxruntime's messages (its node and initializer names) cannot drive a terminal, and an error stays one line. */
export function printable(text) {
  return String(text).replace(CONTROL, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
}
