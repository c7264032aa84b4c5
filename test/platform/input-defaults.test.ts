// An operation's input with its schema's defaults filled in, as the HTTP face's validator (Ajv's useDefaults)
// fills a body's: members left out, in nested objects and array items, never inside anyOf/oneOf; nothing copied
// when nothing is filled. Checked against Ajv itself on the same schemas and values.
// vitest: no database
import { Type } from '@sinclair/typebox';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { withDefaults } from '../../src/platform/input-defaults.ts';

const Schema = Type.Object({
  id: Type.String(),
  releaseHolds: Type.Optional(Type.Boolean({ default: false })),
  caps: Type.Optional(Type.Object({ periodS: Type.Optional(Type.Integer({ default: 86_400 })), perHoldUc: Type.Optional(Type.String()) })),
  budgets: Type.Optional(Type.Array(Type.Object({ id: Type.String(), period: Type.Optional(Type.String({ default: 'day' })) }))),
  tags: Type.Optional(Type.Array(Type.String({ default: 'x' }))),
  either: Type.Optional(Type.Union([Type.Object({ inner: Type.Optional(Type.Boolean({ default: true })) }), Type.Null()])),
  list: Type.Optional(Type.Array(Type.String(), { default: ['a'] })),
});

const ajvFilled = (value: unknown) => {
  const copy = structuredClone(value);
  new Ajv({ useDefaults: true, strict: false }).compile(Schema)(copy);
  return copy;
};

describe('withDefaults', () => {
  const cases: Array<[string, unknown]> = [
    ['a member left out', { id: 'a' }],
    ['members given', { id: 'a', releaseHolds: true, list: [] }],
    ['a nested object', { id: 'a', caps: { perHoldUc: '5' } }],
    ['array items', { id: 'a', budgets: [{ id: 'b0' }, { id: 'b1', period: 'total' }] }],
    ['inside a union (none filled)', { id: 'a', either: {} }],
    ['null inside a union', { id: 'a', either: null }],
  ];
  for (const [name, value] of cases) {
    it(`fills what Ajv fills: ${name}`, () => {
      expect(withDefaults(Schema, structuredClone(value))).toEqual(ajvFilled(value));
    });
  }

  it('leaves its argument as it was, and answers it unchanged when nothing is filled', () => {
    const value = { id: 'a', caps: { perHoldUc: '5' } };
    const filled = withDefaults(Schema, value as Record<string, unknown>);
    expect(value).toEqual({ id: 'a', caps: { perHoldUc: '5' } });
    expect(filled).toEqual({ id: 'a', caps: { perHoldUc: '5', periodS: 86_400 }, releaseHolds: false, list: ['a'] });
    const complete = withDefaults(Schema, filled);
    expect(complete).toBe(filled);
    expect(withDefaults(Schema, filled.list)).toBe(filled.list);
  });

  it('copies a default, so no two inputs share it', () => {
    const one = withDefaults(Schema, { id: 'a' } as Record<string, unknown>);
    const two = withDefaults(Schema, { id: 'b' } as Record<string, unknown>);
    expect(one.list).toEqual(['a']);
    expect(one.list).not.toBe(two.list);
  });

  it('passes bytes and scalars through', () => {
    const bytes = new Uint8Array([1, 2]);
    expect(withDefaults(Type.Object({ bytes: Type.Unsafe<Uint8Array>({}) }), { bytes }).bytes).toBe(bytes);
    expect(withDefaults(Schema, 'text' as never)).toBe('text');
  });
});
