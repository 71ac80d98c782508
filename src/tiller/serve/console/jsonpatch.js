// RFC 6902 JSON Patch, just enough for AG-UI's STATE_DELTA: add, remove, replace, move,
// copy and test over plain JSON values. The console has no dependencies, so this is ours.
//
// `applyPatch` never changes its input: it works on a deep copy and returns the new document,
// so a patch that fails halfway leaves the console's state as it was (the caller then asks
// for a snapshot instead of showing a half-applied state).

/** Thrown when a patch does not apply; `op` is the operation that failed. */
export class PatchError extends Error {
  constructor(message, op) {
    super(message);
    this.name = "PatchError";
    this.op = op;
  }
}

/** RFC 6901: "/a/b~1c/0" -> ["a", "b/c", "0"]; "" is the whole document. */
export function parsePointer(pointer) {
  if (pointer === "") return [];
  if (typeof pointer !== "string" || !pointer.startsWith("/")) {
    throw new PatchError(`a JSON pointer starts with "/": ${JSON.stringify(pointer)}`);
  }
  return pointer
    .slice(1)
    .split("/")
    .map((token) => token.replace(/~1/g, "/").replace(/~0/g, "~"));
}

const clone = (value) => (value === undefined ? undefined : structuredClone(value));

function isContainer(value) {
  return value !== null && typeof value === "object";
}

/** Deep equality of JSON values, for `test` (key order does not matter in objects). */
export function jsonEqual(a, b) {
  if (a === b) return true;
  if (!isContainer(a) || !isContainer(b)) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    return a.length === b.length && a.every((item, i) => jsonEqual(item, b[i]));
  }
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((key) => Object.hasOwn(b, key) && jsonEqual(a[key], b[key]));
}

/** An array index token: digits without a leading zero (or "-" when `allowEnd`). */
function arrayIndex(array, token, { allowEnd }) {
  if (allowEnd && token === "-") return array.length;
  if (!/^(0|[1-9][0-9]*)$/.test(token)) {
    throw new PatchError(`${JSON.stringify(token)} is not an array index`);
  }
  const index = Number(token);
  const limit = allowEnd ? array.length : array.length - 1;
  if (index > limit) throw new PatchError(`array index ${index} is out of range`);
  return index;
}

/** Follow `tokens` from `doc`; throws when a step is missing. */
function resolve(doc, tokens) {
  let node = doc;
  for (const token of tokens) {
    if (Array.isArray(node)) {
      node = node[arrayIndex(node, token, { allowEnd: false })];
    } else if (isContainer(node) && Object.hasOwn(node, token)) {
      node = node[token];
    } else {
      throw new PatchError(`the path /${tokens.join("/")} does not exist`);
    }
  }
  return node;
}

// Each mutation below takes the document and returns it (the root can be replaced).

function addAt(doc, tokens, value) {
  if (tokens.length === 0) return value;
  const parent = resolve(doc, tokens.slice(0, -1));
  const last = tokens[tokens.length - 1];
  if (Array.isArray(parent)) {
    parent.splice(arrayIndex(parent, last, { allowEnd: true }), 0, value);
  } else if (isContainer(parent)) {
    parent[last] = value;
  } else {
    throw new PatchError(`cannot add under a ${typeof parent}`);
  }
  return doc;
}

function removeAt(doc, tokens) {
  if (tokens.length === 0) return undefined;
  const parent = resolve(doc, tokens.slice(0, -1));
  const last = tokens[tokens.length - 1];
  if (Array.isArray(parent)) {
    parent.splice(arrayIndex(parent, last, { allowEnd: false }), 1);
  } else if (isContainer(parent) && Object.hasOwn(parent, last)) {
    delete parent[last];
  } else {
    throw new PatchError(`the path /${tokens.join("/")} does not exist`);
  }
  return doc;
}

function applyOne(doc, op) {
  if (!isContainer(op) || typeof op.op !== "string") {
    throw new PatchError("a patch operation is an object with an `op`", op);
  }
  const path = parsePointer(op.path);
  switch (op.op) {
    case "add":
      return addAt(doc, path, clone(op.value));
    case "remove":
      return removeAt(doc, path);
    case "replace":
      resolve(doc, path); // the target must exist
      return addAt(removeAt(doc, path), path, clone(op.value));
    case "move": {
      const from = parsePointer(op.from);
      const isPrefix = from.length < path.length && from.every((t, i) => t === path[i]);
      if (isPrefix) throw new PatchError("cannot move a value into one of its children", op);
      const value = resolve(doc, from);
      return addAt(removeAt(doc, from), path, value);
    }
    case "copy":
      return addAt(doc, path, clone(resolve(doc, parsePointer(op.from))));
    case "test":
      if (!jsonEqual(resolve(doc, path), op.value)) {
        throw new PatchError(`test failed at ${op.path}`, op);
      }
      return doc;
    default:
      throw new PatchError(`unknown patch operation ${JSON.stringify(op.op)}`, op);
  }
}

/** Apply an RFC 6902 operation list to `doc`; returns the new document. */
export function applyPatch(doc, ops) {
  if (!Array.isArray(ops)) throw new PatchError("a JSON patch is an array of operations");
  let result = clone(doc);
  for (const op of ops) {
    try {
      result = applyOne(result, op);
    } catch (error) {
      if (error instanceof PatchError) {
        error.op ??= op;
        throw error;
      }
      throw new PatchError(String(error), op);
    }
  }
  return result;
}
