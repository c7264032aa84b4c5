// The input schema a tool is shown with (tools/list), when the one it is checked against has a oneOf, anyOf or
// allOf at its root: some clients refuse such a tool outright (the Anthropic API rejects a whole request whose
// tool has one), so it is published as one plain object (docs/decisions.md, "What reaches a tool, and what a
// client reads of it"). The server still validates against the original.

import { isShownTo, PRINCIPAL_KINDS_KEYWORD } from '../platform/schemas.ts';
import type { PrincipalKind } from '../platform/principal.ts';

export type JsonSchema = Record<string, unknown> & { properties?: Record<string, unknown>; required?: string[] };

/** Keywords whose value is data (an instance, or instances), not a schema: copied as they are. */
const DATA_KEYWORDS = new Set(['const', 'enum', 'default', 'examples']);

const isPlainObject = (value: unknown): value is Record<string, unknown> => value !== null && typeof value === 'object' && !Array.isArray(value);

/**
 * The schema a caller of `kind` is shown: every member marked for other kinds (PRINCIPAL_KINDS_KEYWORD, e.g. execute's
 * `agentId`, an owner's alone) left out at any depth, with its place in `required` and in the examples beside it, and
 * the keyword itself dropped (it says nothing to a caller that is shown the member). The one place a face's schema
 * differs by who asks; the tool's check still takes the whole schema, as its HTTP twin does.
 */
export function shownTo(schema: unknown, kind: PrincipalKind): unknown {
  if (Array.isArray(schema)) return schema.map((item) => shownTo(item, kind));
  if (!isPlainObject(schema)) return schema;
  const members = isPlainObject(schema.properties) ? schema.properties : {};
  const hidden = new Set(Object.entries(members).flatMap(([name, member]) => (isShownTo(member, kind) ? [] : [name])));
  const entries = Object.entries(schema).flatMap(([keyword, value]): Array<[string, unknown]> => {
    if (keyword === PRINCIPAL_KINDS_KEYWORD) return [];
    if (keyword === 'properties') return [[keyword, Object.fromEntries(Object.entries(members).filter(([name]) => !hidden.has(name)).map(([name, member]) => [name, shownTo(member, kind)]))]];
    if (keyword === 'required' && Array.isArray(value)) return [[keyword, value.filter((name) => !hidden.has(name))]];
    if (keyword === 'examples' && Array.isArray(value)) {
      return [[keyword, value.map((example) => (isPlainObject(example) ? Object.fromEntries(Object.entries(example).filter(([name]) => !hidden.has(name))) : example))]];
    }
    return [[keyword, DATA_KEYWORDS.has(keyword) ? value : shownTo(value, kind)]];
  });
  return Object.fromEntries(entries);
}

const COMBINATORS = ['oneOf', 'anyOf', 'allOf'] as const;

/** Bounds the object shapes one input schema may unfold into (the catalogue's actions, for execute). */
const INPUT_SHAPES_MAX = 1_000;

interface ObjectShape {
  properties: Record<string, JsonSchema>;
  required: string[];
  closed: boolean;
}

function mergedShape(a: ObjectShape, b: ObjectShape): ObjectShape {
  return { properties: { ...a.properties, ...b.properties }, required: [...new Set([...a.required, ...b.required])], closed: a.closed || b.closed };
}

/** Every object shape `schema` admits: one per oneOf/anyOf branch, each merged with what encloses it and with all its allOf. */
function shapesOf(schema: JsonSchema): ObjectShape[] {
  let shapes: ObjectShape[] = [{ properties: (schema.properties ?? {}) as Record<string, JsonSchema>, required: schema.required ?? [], closed: schema.additionalProperties === false }];
  for (const keyword of COMBINATORS) {
    const branches = schema[keyword] as JsonSchema[] | undefined;
    if (!branches) continue;
    const alternatives =
      keyword === 'allOf'
        ? branches.reduce<ObjectShape[]>((merged, branch) => merged.flatMap((shape) => shapesOf(branch).map((next) => mergedShape(shape, next))), [{ properties: {}, required: [], closed: false }])
        : branches.flatMap(shapesOf);
    shapes = shapes.flatMap((shape) => alternatives.map((alternative) => mergedShape(shape, alternative)));
    if (shapes.length > INPUT_SHAPES_MAX) throw new Error(`an input schema unfolds into more than ${INPUT_SHAPES_MAX} shapes`);
  }
  return shapes;
}

/** Whether `schema` admits one value only (`const`, or an `enum` of one, as OpenAPI 3.0 writes it). */
function isFixed(schema: JsonSchema): boolean {
  return 'const' in schema || (Array.isArray(schema.enum) && schema.enum.length === 1);
}

function fixedValue(schema: JsonSchema): unknown {
  return 'const' in schema ? schema.const : (schema.enum as unknown[])[0];
}

/** A one-line sketch of a schema, for a description: `{owner: string, limit?: integer}`. */
function sketch(schema: JsonSchema): string {
  if ('const' in schema) return JSON.stringify(schema.const);
  if (Array.isArray(schema.enum)) return schema.enum.map((value) => JSON.stringify(value)).join(' | ');
  const branches = (schema.oneOf ?? schema.anyOf) as JsonSchema[] | undefined;
  if (branches) return branches.map(sketch).join(' | ');
  if (schema.type === 'array' && schema.items) return `${sketch(schema.items as JsonSchema)}[]`;
  if (schema.type === 'object' && schema.properties) {
    const required = new Set(schema.required ?? []);
    const members = Object.entries(schema.properties).map(([name, member]) => `${name}${required.has(name) ? '' : '?'}: ${sketch(member as JsonSchema)}`);
    return `{${members.join(', ')}}`;
  }
  return typeof schema.type === 'string' ? schema.type : 'any';
}

/**
 * One member of the published schema, from its schema in every shape that has it: that schema when all agree;
 * an enum when each shape fixes a value (execute's `serviceId`, `action`); otherwise the common type, and a
 * description listing, per combination of the fixed members, the shape the member takes there.
 */
function publishedMember(name: string, shapes: ObjectShape[], fixed: string[]): JsonSchema {
  const having = shapes.filter((shape) => shape.properties[name] !== undefined);
  const schemas = having.map((shape) => shape.properties[name]!);
  if (new Set(schemas.map((schema) => JSON.stringify(schema))).size === 1) return schemas[0]!;
  const types = new Set(schemas.map((schema) => schema.type));
  const type = types.size === 1 ? { type: schemas[0]!.type } : {};
  if (fixed.includes(name)) return { ...type, enum: [...new Set(schemas.map(fixedValue))] };
  const lines = having.map((shape) => {
    const schema = shape.properties[name]!;
    const when = fixed.filter((member) => shape.properties[member] !== undefined).map((member) => `${member} ${JSON.stringify(fixedValue(shape.properties[member]!))}`);
    return `- ${when.length > 0 ? `${when.join(', ')}: ` : ''}${sketch(schema)}${typeof schema.description === 'string' ? `. ${schema.description}` : ''}`;
  });
  const lead = fixed.length > 0 ? `depends on ${fixed.join(' and ')}` : 'one of these shapes';
  return { ...type, description: [`${lead} (the server checks it exactly):`, ...lines].join('\n') };
}

/**
 * The input schema a client is shown: `schema` itself, unless its root is a oneOf/anyOf/allOf, which some
 * clients refuse (the Anthropic API rejects a whole request whose tool has one). Then one plain object: each
 * member as `publishedMember` shows it, required where every shape requires it, closed where every shape is.
 * The server still validates against `schema`, so the flattening loses no check, only some precision of the
 * published form.
 */
export function publishedInputJson(schema: JsonSchema): JsonSchema {
  if (!COMBINATORS.some((keyword) => schema[keyword] !== undefined)) return schema;
  const shapes = shapesOf(schema);
  const names = [...new Set(shapes.flatMap((shape) => Object.keys(shape.properties)))];
  const fixed = names.filter((name) => shapes.every((shape) => shape.properties[name] === undefined || isFixed(shape.properties[name]!)));
  const kept = Object.entries(schema).filter(([keyword]) => !['oneOf', 'anyOf', 'allOf', 'discriminator', 'properties', 'required', 'additionalProperties'].includes(keyword));
  return {
    ...Object.fromEntries(kept),
    type: 'object',
    properties: Object.fromEntries(names.map((name) => [name, publishedMember(name, shapes, fixed)])),
    required: names.filter((name) => shapes.every((shape) => shape.required.includes(name))),
    ...(shapes.every((shape) => shape.closed) ? { additionalProperties: false } : {}),
  };
}
