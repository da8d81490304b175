// seq2onnx in the browser: Translator.load(url, options) fetches a model package served as a folder and runs
// it with onnxruntime-web (WASM). Set `ort.env.wasm.wasmPaths` (exported as `ort`) to where the server serves
// onnxruntime-web's dist/ files when they are not beside the page's script.
import { browserPlatform } from "./platform_browser.js";
import { Translator as BaseTranslator } from "./translator.js";

export class Translator extends BaseTranslator {
  /** A Translator of the package at `url` (absolute, or relative to the page; options: translator.js Translator.open). */
  static load(url, options = {}) {
    return this.open(browserPlatform, url, options);
  }
}

export const ort = browserPlatform.ort;
export { ModelPackageError, Seq2OnnxError } from "./errors.js";
export { decodingOptions, DECODING_DEFAULTS } from "./options.js";
export { browserPlatform };
