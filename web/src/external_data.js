// Graphs whose weights lie in an external data file of the package (docs/CONTRACTS.md "Model package",
// docs/SECURITY.md), as runtime/package/external_data.py reads them, with the same checks and the same one-line errors.
//
// The manifest lists each data file in `files` (so its SHA-256 covers every byte) and, per variant, `external_data`:
// {graph file: its data file}. The runtime reads the data file once into memory and checks its SHA-256 on exactly
// those bytes (ModelPackage.readFile), as it does for every file. onnxruntime then gets the graph's bytes and the data
// file's bytes under the name the graph's tensors give as their location (onnxruntime-common's SessionOptions
// externalData [{path, data: Uint8Array}]: onnxruntime-node hands it to AddExternalInitializersFromFilesInMemory,
// onnxruntime-web mounts it in its own table); onnxruntime opens no file and fetches no URL for it.
//
// Every external tensor of the graph must be one of its main graph's initializers whose location is exactly the data
// file the manifest names for that graph, with an offset and length inside that file that hold exactly its
// dims x data_type bytes; anything else is one ModelPackageError line, before onnxruntime sees the graph.
import { ModelPackageError } from "./errors.js";
import { pyRepr, short } from "./json.js";

export const MAX_DATA_BYTES = 2 ** 40; // a data file: NLLB-200 3.3B's fp32 decoder is ~8 GB; 1 TiB bounds the field
export const FIELD = "external_data"; // a variant's {graph file: data file} (manifest.json)
export const KEYS = ["location", "offset", "length", "checksum"]; // onnx's external_data keys the runtime accepts
export const NUMBER = /^\d{1,20}$/; // offset and length: decimal digits (JS \d is ASCII only, as Python's re.ASCII)
// onnx.proto TensorProto.DataType -> [numpy's name of it, bytes per element] (runtime/package/external_data.py DTYPES)
export const DTYPES = {
  1: ["float32", 4], 2: ["uint8", 1], 3: ["int8", 1], 4: ["uint16", 2], 5: ["int16", 2], 6: ["int32", 4],
  7: ["int64", 8], 9: ["bool", 1], 10: ["float16", 2], 11: ["float64", 8], 12: ["uint32", 4], 13: ["uint64", 8],
};

/** A string cut to n characters (code points, as Python's s[:n]). */
const cut = (s, n) => Array.from(s).slice(0, n).join("");
/** Python's str() of a list of ints: [2, 3]. */
const list = (numbers) => `[${numbers.join(", ")}]`;
/** Python's type(value).__name__ of parsed JSON. */
const typeName = (v) => (v === null ? "NoneType" : Array.isArray(v) ? "list" : typeof v === "string" ? "str" :
  typeof v === "boolean" ? "bool" : typeof v === "number" ? (Number.isInteger(v) ? "int" : "float") :
  v instanceof Number ? "float" : "dict");

/** A graph's bytes with its data file's checked bytes, which onnxruntime gets as the file the graph's tensors name. */
export class ExternalGraph {
  constructor(model, weights, dataName) {
    this.model = model; // Uint8Array: the graph file
    this.weights = weights; // Uint8Array: its data file, SHA-256 checked
    this.dataName = dataName; // the data file's name, every external tensor's location
  }

  /** `options` with the weights as the data file (they are what onnxruntime reads for it). */
  sessionOptions(options) {
    return { ...options, externalData: [{ path: this.dataName, data: this.weights }] };
  }
}

/** A variant's external_data: {graph file: data file}, each graph one of the variant's (`graphs`), each data file
 * listed in `files` (a plain name of a checked size: manifest.js checkFiles) and not a graph itself, and the one that
 * `known` (the variants read before; updated) names for that graph; {} when absent (runtime/package/external_data.py
 * read_variant_field). */
export function readVariantField(entry, files, graphs, where, fieldName, known, reexport) {
  const value = entry[FIELD];
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value) || value instanceof Number) {
    throw new ModelPackageError(`${where}: ${fieldName}['${FIELD}'] should be an object {graph file: data file}, got ` +
      `${typeName(value)}; ${reexport}`);
  }
  for (const [graph, data] of Object.entries(value)) {
    if (!graphs.includes(graph)) {
      throw new ModelPackageError(`${where}: ${fieldName}['${FIELD}'] names ${pyRepr(cut(graph, 60))}, not a graph of ` +
        `this variant (${graphs.join(", ")}); ${reexport}`);
    }
    if (typeof data !== "string" || !Object.hasOwn(files, data) || graphs.includes(data)) {
      const text = typeof data === "string" ? data : short(data, Infinity);
      throw new ModelPackageError(`${where}: ${fieldName}['${FIELD}'][${pyRepr(graph)}] = ${pyRepr(cut(text, 60))} is ` +
        `not a data file listed in 'files'; ${reexport}`);
    }
    known[graph] ??= data;
    if (known[graph] !== data) {
      throw new ModelPackageError(`${where}: ${fieldName}['${FIELD}'] gives ${pyRepr(graph)} the data file ` +
        `${pyRepr(data)}, another variant ${pyRepr(known[graph])}: a graph has one data file; ${reexport}`);
    }
  }
  return { ...value };
}

/** The graph `model` (the bytes of the file `graph`, as errors name it) with its external tensors `tensors`
 * (onnx_bytes.js externalTensors), checked against `weights`, the checked bytes of its data file `dataName`
 * (runtime/package/external_data.py external_graph). */
export function externalGraph(model, tensors, graph, dataName, weights, reexport) {
  const seen = new Set();
  const size = BigInt(weights.length);
  for (const t of tensors) {
    const what = `${graph}: its tensor ${pyRepr(cut(t.name, 60))}`;
    if (!t.initializer) {
      throw new ModelPackageError(`${what} keeps its data in an external file but is not an initializer of the main ` +
        `graph: only those may; ${reexport}`);
    }
    const entries = new Map(t.entries);
    const unknown = [...entries.keys()].filter((k) => !KEYS.includes(k)).sort();
    if (entries.size !== t.entries.length || unknown.length) {
      throw new ModelPackageError(`${what} has repeated or unknown external_data keys ` +
        `(${unknown.map((k) => cut(k, 20)).join(", ") || "repeated"}); ${reexport}`);
    }
    const location = entries.get("location");
    if (location !== dataName) {
      throw new ModelPackageError(`${what} names the external data file ${pyRepr(cut(location ?? "None", 80))}, but the ` +
        `manifest's data file for this graph is ${pyRepr(dataName)}: a graph reads only its own data file in the ` +
        `package folder; ${reexport}`);
    }
    const offset = entries.get("offset") ?? "0", length = entries.get("length");
    if (!(NUMBER.test(offset) && length !== undefined && NUMBER.test(length))) {
      throw new ModelPackageError(`${what} has external_data offset ${pyRepr(cut(offset, 30))} and length ` +
        `${pyRepr(cut(length ?? "None", 30))}: both must be decimal numbers; ${reexport}`);
    }
    const [offsetN, lengthN] = [BigInt(offset), BigInt(length)];
    if (offsetN + lengthN > size) {
      throw new ModelPackageError(`${what} lies at bytes ${offsetN}..${offsetN + lengthN} of ${dataName}, which has ` +
        `${size}: past its end; ${reexport}`);
    }
    const dtype = DTYPES[t.dataType];
    if (dtype === undefined || t.dims.some((d) => d < 0n)) {
      throw new ModelPackageError(`${what} has data type ${t.dataType} and dims ${list(t.dims.slice(0, 8))}, which ` +
        `external data cannot hold here; ${reexport}`);
    }
    const bytes = t.dims.reduce((a, b) => a * b, 1n) * BigInt(dtype[1]);
    if (bytes !== lengthN) {
      throw new ModelPackageError(`${what} has dims ${list(t.dims.slice(0, 8))} of ${dtype[0]} (${bytes} bytes) but ` +
        `external_data length ${lengthN}; ${reexport}`);
    }
    if (seen.has(t.name)) {
      throw new ModelPackageError(`${what} is named twice among the external initializers; ${reexport}`);
    }
    seen.add(t.name);
  }
  return new ExternalGraph(model, weights, dataName);
}
