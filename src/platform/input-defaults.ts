// An operation's input with the defaults its schema states filled in, as the HTTP face's validator fills a body's
// (Ajv's `useDefaults`, Fastify's setting): a member left out (undefined) whose schema in its object's
// `properties` has a `default` takes a copy of it, and the objects and array items present are filled the same way,
// down their `properties` and `items`; nothing inside anyOf, oneOf, allOf or not, where Ajv applies no default
// either. MCP checks a tool's arguments without filling them, so without this the same request reached an operation,
// and its Idempotency-Key's fingerprint, in two forms (found from outside: a freeze over HTTP, then the same freeze
// over MCP with its key, was refused idempotency_key_reused). See docs/decisions.md "Idempotency".

interface SchemaShape {
  properties?: Record<string, SchemaShape>;
  items?: SchemaShape | SchemaShape[];
  default?: unknown;
}

/** `value` with `schema`'s defaults filled in; the same object when there was nothing to fill (no copy made). */
export function withDefaults<T>(schema: SchemaShape, value: T): T {
  if (Array.isArray(value)) {
    const items = schema.items;
    if (items === undefined || Array.isArray(items)) return value;
    let copy: unknown[] | undefined;
    value.forEach((item: unknown, index) => {
      const filled = withDefaults(items, item);
      if (filled !== item) (copy ??= [...value])[index] = filled;
    });
    return (copy ?? value) as T;
  }
  if (value === null || typeof value !== 'object' || schema.properties === undefined || ArrayBuffer.isView(value)) return value;
  let copy: Record<string, unknown> | undefined;
  for (const [name, member] of Object.entries(schema.properties)) {
    const current = (value as Record<string, unknown>)[name];
    const filled = current === undefined ? ('default' in member ? withDefaults(member, structuredClone(member.default)) : undefined) : withDefaults(member, current);
    if (filled !== current) (copy ??= { ...(value as Record<string, unknown>) })[name] = filled;
  }
  return (copy ?? value) as T;
}
