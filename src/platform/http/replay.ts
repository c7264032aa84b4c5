// How a replayed answer is sent. A stored answer was made by the release that ran the request, and the retry may
// reach a later one (a deploy between the tries), whose response schema requires a member the stored body lacks:
// its serializer would throw, and the retry would read 500 where the client is owed the answer it missed. A replay
// is rendered by its route's own serializer, byte for byte as the first answer was; only when that throws is it
// rendered again by the same schema with no member required: what the stored body has is sent as the schema types
// it and in the order the first answer had, what the schema does not name is still left out (a result can carry
// members its route never sends), and a member the stored body lacks stays absent, as it was in the answer first
// made. The strict try comes first because `required` also chooses between the branches of an `anyOf`, which a
// schema without it could no longer tell apart.
// docs/decisions.md "A replay is sent as stored, under a schema that requires nothing".
import type { FastifyReply } from 'fastify';
import { REPLAY_HEADER } from '../idempotency.ts';

/** Keywords whose value maps member names to schemas: their keys are names, never keywords. */
const NAME_MAPS = new Set(['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas']);
/** How deep shared schemas are followed into each other (they never cycle; this only bounds a mistake). */
const SHARED_DEPTH_MAX = 16;

const lenientOf = new WeakMap<object, object>();

/** Marks `reply` a replay: the `Idempotent-Replayed` header, and the rendering of its `status` described above. */
export function sendsReplay(reply: FastifyReply, status: number): void {
  reply.header(REPLAY_HEADER, 'true');
  const schema = responseSchemaOf(reply, status);
  if (schema === undefined) return;
  const strict = reply.compileSerializationSchema(schema as Record<string, unknown>, String(status));
  // A reply with a serializer of its own gets no content type from Fastify: the one its first answer had.
  reply.type('application/json; charset=utf-8');
  reply.serializer((payload: Record<string, unknown>) => {
    try {
      return strict(payload);
    } catch {
      let lenient = lenientOf.get(schema);
      if (lenient === undefined) {
        lenient = withoutRequired(schema, (id) => reply.server.getSchema(id), 0) as object;
        lenientOf.set(schema, lenient);
      }
      return reply.compileSerializationSchema(lenient as Record<string, unknown>, String(status))(payload);
    }
  });
}

function responseSchemaOf(reply: FastifyReply, status: number): object | undefined {
  const responses = (reply.routeOptions.schema as { response?: Record<string, unknown> } | undefined)?.response;
  const schema = responses?.[String(status)] ?? responses?.[`${String(status)[0]}xx`] ?? responses?.default;
  return schema !== null && typeof schema === 'object' ? schema : undefined;
}

/**
 * A copy of `schema` with no `required` keyword at any depth; a reference to a shared schema (by its `$id`) is
 * replaced by a copy of that schema, made the same way, without its `$id` (the original keeps it).
 */
function withoutRequired(schema: unknown, shared: (id: string) => unknown, depth: number): unknown {
  if (Array.isArray(schema)) return schema.map((item) => withoutRequired(item, shared, depth));
  if (schema === null || typeof schema !== 'object') return schema;
  const ref = (schema as { $ref?: unknown }).$ref;
  if (typeof ref === 'string' && !ref.includes('#') && depth < SHARED_DEPTH_MAX) {
    const target = shared(ref);
    if (target !== undefined) {
      const { $id: _id, ...copy } = withoutRequired(target, shared, depth + 1) as Record<string, unknown>;
      return copy;
    }
  }
  const required = (schema as { required?: unknown }).required;
  const copy: Record<string, unknown> = {};
  for (const [keyword, value] of Object.entries(schema)) {
    if (keyword === 'required') continue;
    if (!NAME_MAPS.has(keyword) || value === null || typeof value !== 'object') {
      copy[keyword] = withoutRequired(value, shared, depth);
      continue;
    }
    let members = Object.entries(value);
    // fast-json-stringify writes an object's required members first, then the others: the same order here, so a
    // replay's members come in the order of the first answer's.
    if (keyword === 'properties' && Array.isArray(required)) {
      members = [...members.filter(([name]) => required.includes(name)), ...members.filter(([name]) => !required.includes(name))];
    }
    copy[keyword] = Object.fromEntries(members.map(([name, member]) => [name, withoutRequired(member, shared, depth)]));
  }
  return copy;
}
