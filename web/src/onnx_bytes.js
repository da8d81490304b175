// Which tensors of an ONNX model (its bytes) keep their data in external files? Answered without an onnx library, as
// runtime/package/onnx_bytes.py does (the same walk, so the same tensors in the same order, and the same errors).
// onnxruntime reads external data from files the model names; the runtime never lets it: a graph of a package with
// external data gets its weights from the data file the manifest lists for it, read and hashed by the runtime
// (external_data.js), and any other external tensor is refused (docs/SECURITY.md). A model is a protobuf message
// (onnx.proto): this walks the messages that can hold a tensor, skipping every other field by its length, and reads
// each TensorProto's name, dims, data_type, data_location and external_data. Linear in the size of the model; no
// recursion.

// onnx.proto field numbers: message -> {field: the message it holds}, for the fields that lead to tensors
const [MODEL, TRAINING_INFO, GRAPH, FUNCTION, NODE, ATTRIBUTE, SPARSE_TENSOR, TENSOR] = [0, 1, 2, 3, 4, 5, 6, 7];
const HOLDS = {
  [MODEL]: { 7: GRAPH, 20: TRAINING_INFO, 25: FUNCTION }, // graph, training_info, functions
  [TRAINING_INFO]: { 1: GRAPH, 2: GRAPH }, // initialization, algorithm
  [GRAPH]: { 1: NODE, 5: TENSOR, 15: SPARSE_TENSOR }, // node, initializer, sparse_initializer
  [FUNCTION]: { 7: NODE, 11: ATTRIBUTE }, // node, attribute_proto
  [NODE]: { 5: ATTRIBUTE }, // attribute
  [ATTRIBUTE]: { 5: TENSOR, 6: GRAPH, 10: TENSOR, 11: GRAPH, 22: SPARSE_TENSOR, 23: SPARSE_TENSOR },
  [SPARSE_TENSOR]: { 1: TENSOR, 2: TENSOR }, // values, indices
  [TENSOR]: {},
};
const EXTERNAL_DATA = 13, DATA_LOCATION = 14, EXTERNAL = 1; // TensorProto.external_data, .data_location, EXTERNAL
const DIMS = 1, DATA_TYPE = 2, NAME = 8; // TensorProto.dims (int64, packed or not), .data_type, .name
const GRAPH_FIELD = 7, INITIALIZER = 5; // ModelProto.graph, GraphProto.initializer
const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** [value, index after it] of the varint at data[i], a BigInt (exact over 64 bits). */
function varintBig(data, i) {
  let value = 0n;
  for (let shift = 0n; ; shift += 7n) {
    if (i >= data.length || shift > 63n) throw new RangeError(`a truncated or overlong varint at byte ${i}`);
    const byte = data[i++];
    value |= BigInt(byte & 0x7f) << shift;
    if (byte < 0x80) return [value, i];
  }
}

/** [value, index after it] of the varint at data[i], as a Number (exact below 2**53: lengths, keys, enums). */
function varint(data, i) {
  const [value, next] = varintBig(data, i);
  return [Number(value), next];
}

/** An int64 field's varint as the signed value (two's complement over 64 bits). */
const signed = (value) => BigInt.asIntN(64, value);

function text(bytes) {
  try {
    return UTF8.decode(bytes);
  } catch (e) {
    throw new RangeError(`a string field that is not UTF-8 (${e.message})`);
  }
}

/** A StringStringEntryProto: [key, value] (key = 1, value = 2, both strings; the last of each wins, as in protobuf). */
function stringEntry(model, i, end) {
  let key = "", value = "";
  while (i < end) {
    let tag, length;
    [tag, i] = varint(model, i);
    if (tag % 8 !== 2) throw new RangeError(`an external_data entry with a field of wire type ${tag % 8} at byte ${i}`);
    [length, i] = varint(model, i);
    if (i + length > end) throw new RangeError(`an external_data entry runs past its end at byte ${end}`);
    if (Math.floor(tag / 8) === 1) key = text(model.subarray(i, i + length));
    else if (Math.floor(tag / 8) === 2) value = text(model.subarray(i, i + length));
    i += length;
  }
  return [key, value];
}

/** Every tensor of `model` (Uint8Array, a serialized ModelProto) whose data is external (data_location EXTERNAL or
 * external_data entries), as runtime/package/onnx_bytes.py ExternalTensor: {name, dataType (TensorProto.DataType), dims
 * (BigInt), entries ([key, value] in order), initializer (one of the main graph's initializers)}; RangeError when
 * the bytes are not a well-formed protobuf message (onnx.proto uses no groups). */
export function externalTensors(model) {
  const found = [];
  const todo = [[MODEL, 0, model.length, false]]; // [message, start, end, in the main graph] still to read
  while (todo.length) {
    let [message, i, end, main] = todo.pop();
    const holds = HOLDS[message];
    const tensor = message === TENSOR ? { name: "", dataType: 0, dims: [], entries: [], initializer: main } : null;
    let external = false;
    while (i < end) {
      let key;
      [key, i] = varint(model, i);
      const field = Math.floor(key / 8), wire = key % 8;
      if (field === 0) throw new RangeError(`field number 0 at byte ${i}`);
      if (wire === 0) {
        let value;
        [value, i] = varintBig(model, i);
        if (tensor !== null) {
          if (field === DATA_LOCATION) external = value === BigInt(EXTERNAL);
          else if (field === DATA_TYPE) tensor.dataType = Number(value);
          else if (field === DIMS) tensor.dims.push(signed(value));
        }
      } else if (wire === 2) {
        let length;
        [length, i] = varint(model, i);
        if (i + length > end) throw new RangeError(`a field runs past the end of its message at byte ${end}`);
        if (tensor !== null) {
          if (field === EXTERNAL_DATA) tensor.entries.push(stringEntry(model, i, i + length));
          else if (field === NAME) tensor.name = text(model.subarray(i, i + length));
          else if (field === DIMS) { // packed
            for (let j = i, value; j < i + length;) {
              [value, j] = varintBig(model, j);
              tensor.dims.push(signed(value));
            }
          }
        }
        if (Object.hasOwn(holds, field)) {
          todo.push([holds[field], i, i + length,
            (message === MODEL && field === GRAPH_FIELD) || (main && message === GRAPH && field === INITIALIZER)]);
        }
        i += length;
      } else if (wire === 1 || wire === 5) {
        i += wire === 1 ? 8 : 4;
      } else throw new RangeError(`wire type ${wire} at byte ${i}`);
      if (i > end) throw new RangeError(`a field runs past the end of its message at byte ${end}`);
    }
    if (tensor !== null && (external || tensor.entries.length)) found.push(tensor);
  }
  return found;
}

/** True when a tensor of `model` has its data in an external file (externalTensors). */
export function hasExternalData(model) {
  return externalTensors(model).length > 0;
}
