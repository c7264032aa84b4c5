// The members Fastify's JSON parser (secure-json-parse, with its defaults) refuses in every REST body: a
// `__proto__` key, and a `constructor` key holding an object with a `prototype` key. `/mcp` keeps its body
// raw, so its messages never met that parser (the SDK's own validation drops a `__proto__` member of the
// arguments, but keeps deeper ones); they are checked here, by the same rule, before the SDK sees them.

/** `name`'s path inside `path` ('' is the root). */
function memberPath(path: string, name: string, inArray: boolean): string {
  if (inArray) return `${path}[${name}]`;
  return path === '' ? name : `${path}.${name}`;
}

/** The path from `root` (e.g. `params.arguments.__proto__`) of the first prototype key in it, if any. */
export function findPrototypeKey(root: unknown): string | undefined {
  // Iterative, so a deeply nested message cannot exhaust the stack.
  const pending: Array<[unknown, string]> = [[root, '']];
  while (pending.length > 0) {
    const [value, path] = pending.pop()!;
    if (value === null || typeof value !== 'object') continue;
    if (Object.hasOwn(value, '__proto__')) return memberPath(path, '__proto__', false);
    const constructor: unknown = Object.hasOwn(value, 'constructor') ? (value as { constructor: unknown }).constructor : undefined;
    if (typeof constructor === 'object' && constructor !== null && Object.hasOwn(constructor, 'prototype')) return memberPath(path, 'constructor.prototype', false);
    const inArray = Array.isArray(value);
    for (const [name, member] of Object.entries(value)) pending.push([member, memberPath(path, name, inArray)]);
  }
  return undefined;
}

/** What a refusal of a prototype key says. */
export function prototypeKeyDetail(path: string): string {
  return `${path} is a prototype key ("__proto__", or "constructor" with a "prototype"), which is refused in any JSON body`;
}
