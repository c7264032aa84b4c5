// Request/response schema pieces shared by several features, so one rule has one definition.
import { Type, type TSchema } from '@sinclair/typebox';
import { ERROR_CATALOGUE } from './errors.ts';
import { MICROCREDITS_PATTERN, UC_DIGITS_MAX } from './money.ts';
import type { PrincipalKind } from './principal.ts';

/**
 * The keyword of a request member meant for some kinds of caller only (execute's `agentId`: an owner names the agent;
 * an agent acts as itself, its own id or none): the kinds it is for. A face shown to one caller (MCP's tool list, per
 * credential) leaves the member out for any other kind; the member is still checked as before wherever it is sent,
 * and the OpenAPI document shows the keyword as an extension.
 */
export const PRINCIPAL_KINDS_KEYWORD = 'x-principal-kinds';

/** Schema options marking a request member as meant for `kinds` only (PRINCIPAL_KINDS_KEYWORD). */
export const sentBy = (kinds: readonly PrincipalKind[]) => ({ [PRINCIPAL_KINDS_KEYWORD]: [...kinds] });

/** Whether a caller of `kind` is shown `member`: one without the keyword is for everyone. */
export function isShownTo(member: unknown, kind: PrincipalKind): boolean {
  const kinds = (member as Record<string, unknown> | null)?.[PRINCIPAL_KINDS_KEYWORD];
  return !Array.isArray(kinds) || kinds.includes(kind);
}

export const CATEGORY_PATTERN = '^[a-z0-9][a-z0-9._-]{0,63}$';

/**
 * Holds a character that shows: one that is neither white space (JavaScript's `\s`, Unicode's spaces included)
 * nor one of the characters that render as nothing (zero-width spaces, joiners and marks, the Hangul fillers, the
 * Braille blank, variation selectors, the bidirectional and invisible formatting controls: Unicode's default
 * ignorables in the Basic Multilingual Plane). Written with `\u` escapes only, so a client's own regular
 * expressions (a JSON Schema validator in any language) read it as this gateway's do.
 */
export const VISIBLE_PATTERN =
  '[^\\s\\u00AD\\u034F\\u061C\\u115F\\u1160\\u17B4\\u17B5\\u180B-\\u180F\\u200B-\\u200F\\u202A-\\u202E\\u2060-\\u206F\\u2800\\u3164\\uFE00-\\uFE0F\\uFEFF\\uFFA0]';
export const VISIBLE_CHARACTER = new RegExp(VISIBLE_PATTERN, 'u');
/**
 * A name people read where they decide (an agent's, a merchant's on an approval page, an offer's, an API key's):
 * 1 to 100 characters, at least one of which shows.
 */
export const DisplayName = (description?: string) =>
  Type.String({ minLength: 1, maxLength: 100, pattern: VISIBLE_PATTERN, description: description ?? '1 to 100 characters, at least one of which shows (not white space or invisible characters alone)' });

export const Microcredits = (description?: string) =>
  Type.String({ pattern: MICROCREDITS_PATTERN, maxLength: UC_DIGITS_MAX, description: description ?? `microcredits as a decimal string of at most ${UC_DIGITS_MAX} digits` });
/** The largest value of a PostgreSQL INTEGER column (a version number): a larger input is refused, not sent to it. */
export const INTEGER_MAX = 2_147_483_647;
/**
 * The last second of the year 9999: no time an input names needs to be later, and every one up to it fits a BIGINT
 * and a double exactly (a larger JSON number would be rounded, or overflow the column).
 */
export const UNIX_SECONDS_MAX = 253_402_300_799;
export const UnixSeconds = (description?: string) => Type.Integer({ minimum: 0, maximum: UNIX_SECONDS_MAX, description: `${description ?? 'time'} (Unix seconds)` });
/** A version number (1, 2, …) as a path or query parameter names one. */
export const VersionNumber = (description: string) => Type.Integer({ minimum: 1, maximum: INTEGER_MAX, description });
export const Category = Type.String({ pattern: CATEGORY_PATTERN, description: 'lower-case category slug, 1–64 characters' });
/** A category an agent may buy in, or "*" for any. */
export const CategoryOrAny = Type.Union([Category, Type.Literal('*')]);
const RESOURCE_ID = { minLength: 1, maxLength: 200, pattern: '^[A-Za-z0-9_.:-]+$' };
export const ResourceId = Type.String(RESOURCE_ID);
/** A path parameter naming a resource, described for the OpenAPI document (e.g. `idOf('offer (off_…)')`). */
export const idOf = (resource: string) => Type.String({ ...RESOURCE_ID, description: `id of the ${resource}` });
export const IdParams = Type.Object({ id: idOf('resource the path names') });
export const AgentIdParams = Type.Object({ id: idOf('agent (agt_…)') });
export const MerchantIdParams = Type.Object({ id: idOf('merchant (mer_…)') });
export const RedemptionIdParams = Type.Object({ id: idOf('redemption: the hold (hold_…)') });
export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);
/** The body of an operation that takes none but its path: `{}`, so a member sent by mistake is refused, not ignored. */
export const EmptyBody = Type.Object({}, { additionalProperties: false, examples: [{}], description: 'no members: {} (or, where the route says so, no body at all)' });

/** Every list's page size unless the request says otherwise; the query runner applies it (PageQuery's default). */
export const PAGE_LIMIT_DEFAULT = 20;
export const PAGE_LIMIT_MAX = 100;

/** A page request as a query's read sees it: the runner has applied the default limit. */
export interface Page {
  limit: number;
  startingAfter?: string;
}

export const PageQuery = Type.Object(
  {
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: PAGE_LIMIT_MAX, default: PAGE_LIMIT_DEFAULT, description: `page size, 1–${PAGE_LIMIT_MAX}` })),
    startingAfter: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'id of the last item of the previous page (leave it out for the first page); an id that is no item of this list is 400 invalid_input' })),
  },
  { additionalProperties: false },
);

/** The members of every RFC 9457 problem body: `Problem`'s, and those of the problems that type a code's own members. */
export const problemMembers = (codeDescription = 'stable machine-readable code') => ({
  type: Type.String({ description: 'URI of the problem type; dereferences to the error catalogue' }),
  title: Type.String(),
  status: Type.Integer(),
  code: Type.String({ enum: Object.keys(ERROR_CATALOGUE), description: codeDescription }),
  detail: Type.Optional(Type.String()),
  errors: Type.Optional(
    Type.Array(
      Type.Object(
        {
          path: Type.String({ description: 'the member, named from the part of the request that holds it: body/budgets/0/merchantId, params/id, querystring/limit (over MCP, arguments/…)' }),
          message: Type.String({ description: 'what is wrong with it' }),
        },
        { additionalProperties: false },
      ),
      { description: 'with invalid_input, the members of the request it refuses, whether by its schema or by a rule the schema cannot state (a merchant that does not exist); `detail` says the first as "<path> <message>"' },
    ),
  ),
});
