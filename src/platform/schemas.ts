// Request/response schema pieces shared by several features, so one rule has one definition.
import { Type, type TSchema } from '@sinclair/typebox';
import { MICROCREDITS_PATTERN } from './money.ts';

export const CATEGORY_PATTERN = '^[a-z0-9][a-z0-9._-]{0,63}$';

export const Microcredits = (description?: string) =>
  Type.String({ pattern: MICROCREDITS_PATTERN, maxLength: 19, description: description ?? 'microcredits as a decimal string' });
export const UnixSeconds = (description?: string) => Type.Integer({ minimum: 0, description: `${description ?? 'time'} (Unix seconds)` });
export const Category = Type.String({ pattern: CATEGORY_PATTERN, description: 'lower-case category slug, 1–64 characters' });
export const ResourceId = Type.String({ minLength: 1, maxLength: 200, pattern: '^[A-Za-z0-9_.:-]+$' });
export const IdParams = Type.Object({ id: ResourceId });
export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

export const PageQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'page size, 1–100' })),
    startingAfter: Type.Optional(Type.String({ maxLength: 200, description: 'id of the last item of the previous page' })),
  },
  { additionalProperties: false },
);
