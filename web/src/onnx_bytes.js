// Does an ONNX model (its bytes) keep tensor data in external files? Answered without an onnx library, as
// runtime/onnx_bytes.py does: onnxruntime would read such data from files no checksum of the package covers,
// so the runtime refuses the graph (docs/SECURITY.md). A model is a protobuf message (onnx.proto): this walks
// the messages that can hold a tensor, skipping every other field by its length, and looks at each
// TensorProto's data_location and external_data. Linear in the size of the model; no recursion.

// onnx.proto field numbers: message -> {field: the message it holds}, for the fields that lead to tensors
const [MODEL, TRAINING_INFO, GRAPH, FUNCTION, NODE, ATTRIBUTE, SPARSE_TENSOR, TENSOR] = [0, 1, 2, 3, 4, 5, 6, 7];
const HOLDS = {
  [MODEL]: { 7: GRAPH, 20: TRAINING_INFO, 25: FUNCTION },
  [TRAINING_INFO]: { 1: GRAPH, 2: GRAPH },
  [GRAPH]: { 1: NODE, 5: TENSOR, 15: SPARSE_TENSOR },
  [FUNCTION]: { 7: NODE, 11: ATTRIBUTE },
  [NODE]: { 5: ATTRIBUTE },
  [ATTRIBUTE]: { 5: TENSOR, 6: GRAPH, 10: TENSOR, 11: GRAPH, 22: SPARSE_TENSOR, 23: SPARSE_TENSOR },
  [SPARSE_TENSOR]: { 1: TENSOR, 2: TENSOR },
  [TENSOR]: {},
};
const EXTERNAL_DATA = 13, DATA_LOCATION = 14, EXTERNAL = 1;

/** [value, index after it] of the varint at data[i] (value as a Number: exact below 2**53). */
function varint(data, i) {
  let value = 0;
  for (let shift = 0; ; shift += 7) {
    if (i >= data.length || shift > 63) throw new RangeError(`a truncated or overlong varint at byte ${i}`);
    const byte = data[i++];
    value += (byte & 0x7f) * 2 ** shift;
    if (byte < 0x80) return [value, i];
  }
}

/** True when a tensor of `model` (Uint8Array, a serialized ModelProto) has its data in an external file;
 * RangeError when the bytes are not a well-formed protobuf message. */
export function hasExternalData(model) {
  const todo = [[MODEL, 0, model.length]];
  while (todo.length) {
    let [message, i, end] = todo.pop();
    const holds = HOLDS[message];
    while (i < end) {
      let key;
      [key, i] = varint(model, i);
      const field = Math.floor(key / 8), wire = key % 8;
      if (field === 0) throw new RangeError(`field number 0 at byte ${i}`);
      if (wire === 0) {
        let value;
        [value, i] = varint(model, i);
        if (message === TENSOR && field === DATA_LOCATION && value === EXTERNAL) return true;
      } else if (wire === 2) {
        let length;
        [length, i] = varint(model, i);
        if (message === TENSOR && field === EXTERNAL_DATA) return true;
        if (Object.hasOwn(holds, field)) todo.push([holds[field], i, i + length]);
        i += length;
      } else if (wire === 1 || wire === 5) {
        i += wire === 1 ? 8 : 4;
      } else throw new RangeError(`wire type ${wire} at byte ${i}`);
      if (i > end) throw new RangeError(`a field runs past the end of its message at byte ${end}`);
    }
  }
  return false;
}
