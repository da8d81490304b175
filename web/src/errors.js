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
