// A manifest against the JSON Schema of manifest.json (manifest_schema.js, generated from the Python runtime's records:
// runtime/package/schema.py). The validator knows the part of JSON Schema that schema uses: type, const, enum,
// pattern, minimum, maximum, maxItems, maxProperties, properties, required, additionalProperties, propertyNames,
// items, anyOf and $ref within the schema.
// The reader (manifest.js) checks the fields it reads by hand first, with the Python runtime's messages; this catches
// what is left, naming the field as the Python records do: a record's field .field, an entry of an object [key], an
// item [i] (variants['int8'].thresholds['top1_agreement'], graphs.encoder.inputs[0].name).
import { ModelPackageError } from "./errors.js";
import { isInteger, JsonFloat, short } from "./json.js";
import { MANIFEST_SCHEMA } from "./manifest_schema.js";

// the kinds as the Python runtime's messages name them (runtime/package/manifest_fields.py KIND_NAMES)
const KIND_NAMES = { object: "an object", array: "a list", string: "a string", integer: "an integer",
  number: "a number", boolean: "true or false", null: "null" };

/** Is `value` (parsed by json.js) of the JSON Schema type `type`? */
function isType(value, type) {
  switch (type) {
    case "object": return value !== null && typeof value === "object" && !Array.isArray(value) && !(value instanceof Number);
    case "array": return Array.isArray(value);
    case "string": return typeof value === "string";
    case "integer": return isInteger(value);
    case "number": return typeof value === "number" || value instanceof JsonFloat;
    case "boolean": return typeof value === "boolean";
    case "null": return value === null;
    default: throw new Error(`the manifest schema uses the type ${type}, which schema.js does not know`);
  }
}

const same = (a, b) => a === b || (a instanceof JsonFloat && a.valueOf() === b);
const child = (path, key) => (path ? `${path}.${key}` : key);

/** The first way `value` breaks `schema`, as {path, should, value} or {path, missing: true}; null if none. */
function firstError(value, schema, path, root) {
  if (schema.$ref) {
    const name = schema.$ref.replace("#/$defs/", "");
    return firstError(value, root.$defs[name], path, root);
  }
  if (schema.anyOf) {
    const errors = schema.anyOf.map((s) => firstError(value, s, path, root));
    if (errors.some((e) => e === null)) return null;
    return errors.find((e, i) => !(schema.anyOf[i].type === "null")) ?? errors[0];
  }
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => isType(value, t))) {
      return { path, should: types.filter((t) => t !== "null").map((t) => KIND_NAMES[t]).join(" or "), value };
    }
  }
  if (schema.const !== undefined && !same(value, schema.const)) return { path, should: short(schema.const), value };
  if (schema.enum && !schema.enum.some((e) => same(value, e))) {
    return { path, should: `one of ${schema.enum.filter((e) => e !== null).join(", ")}`, value };
  }
  if (typeof value === "string" && schema.pattern && !new RegExp(schema.pattern).test(value)) {
    return { path, should: `a string matching ${schema.pattern}`, value };
  }
  if ((typeof value === "number" || value instanceof JsonFloat) &&
    ((schema.minimum !== undefined && !(value >= schema.minimum)) || (schema.maximum !== undefined && !(value <= schema.maximum)))) {
    return { path, should: `in [${schema.minimum ?? "-inf"}, ${schema.maximum ?? "inf"}]`, value };
  }
  if (Array.isArray(value)) {
    if (schema.maxItems !== undefined && value.length > schema.maxItems) {
      return { path, should: `a list of at most ${schema.maxItems} items`, value };
    }
    if (schema.items) {
      for (let i = 0; i < value.length; i++) {
        const e = firstError(value[i], schema.items, `${path}[${i}]`, root);
        if (e) return e;
      }
    }
  } else if (isType(value, "object")) {
    return objectError(value, schema, path, root);
  }
  return null;
}

function objectError(value, schema, path, root) {
  const keys = Object.keys(value);
  if (schema.maxProperties !== undefined && keys.length > schema.maxProperties) {
    return { path, should: `an object of at most ${schema.maxProperties} entries`, value };
  }
  const declared = schema.properties ?? {};
  for (const key of schema.required ?? []) {
    if (!Object.hasOwn(declared, key) && !Object.hasOwn(value, key)) return { path: `${path}[${short(key)}]`, missing: true };
  }
  for (const [key, sub] of Object.entries(declared)) { // in the record's order, as the Python reader checks them
    if (!Object.hasOwn(value, key)) {
      if ((schema.required ?? []).includes(key)) return { path: child(path, key), missing: true };
      continue;
    }
    const e = firstError(value[key], sub, child(path, key), root);
    if (e) return e;
  }
  const others = keys.filter((k) => !Object.hasOwn(declared, k));
  if (schema.additionalProperties === false && others.length) {
    const key = [...others].sort()[0];
    return { path: child(path, key), should: "absent (this runtime does not know it)", value: value[key] };
  }
  for (const key of others) {
    if (schema.propertyNames?.pattern && !new RegExp(schema.propertyNames.pattern).test(key)) {
      return { path, should: `an object whose keys match ${schema.propertyNames.pattern}`, value: key };
    }
    if (typeof schema.additionalProperties === "object") {
      const e = firstError(value[key], schema.additionalProperties, `${path}[${short(key)}]`, root);
      if (e) return e;
    }
  }
  return null;
}

/** Throws one ModelPackageError line naming the first field of `manifest` that breaks `schema` (default: the
 * manifest's), as the Python reader's messages do. */
export function checkSchema(manifest, where, reexport, schema = MANIFEST_SCHEMA) {
  const e = firstError(manifest, schema, "", schema);
  if (e === null) return;
  const what = e.missing ? "is missing" : `should be ${e.should}, got ${short(e.value)}`;
  throw new ModelPackageError(`${where}: the field ${e.path || "manifest"} ${what}; ${reexport}`);
}
