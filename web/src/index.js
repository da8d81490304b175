// seq2onnx in Node: Translator.load(folder, options) reads a model package from disk and runs it with
// onnxruntime-node. The browser entry is browser.js (package.json "exports" picks it for bundlers).
import { nodePlatform } from "./platform_node.js";
import { Translator as BaseTranslator } from "./translator.js";

export class Translator extends BaseTranslator {
  /** A Translator of the package folder `dir` (options: see translator.js Translator.open). */
  static load(dir, options = {}) {
    return this.open(nodePlatform, dir, options);
  }
}

export { ModelPackageError, Seq2OnnxError } from "./errors.js";
export { decodingOptions, DECODING_DEFAULTS } from "./options.js";
export { readPackage } from "./manifest.js";
export { nodePlatform };
