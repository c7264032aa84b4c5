// The kill switch's reads, for every face: an agent's latest freeze report (its owner: the acting-for rule,
// anyone else 404) and a merchant's revocations feed (its owner, or one of its API keys with the scope).
import { Type } from '@sinclair/typebox';
import type { AgentService } from '../agents/service.ts';
import type { MerchantService } from '../merchants/service.ts';
import { idOf } from '../platform/schemas.ts';
import type { Query } from '../platform/queries.ts';
import { REVOCATIONS_PAGE_DEFAULT, REVOCATIONS_PAGE_MAX, type FreezeReport, type RevocationPage, type RevocationService } from './service.ts';

export const FreezeReportInput = Type.Object({ id: idOf('agent (agt_…)') }, { additionalProperties: false });

export const RevocationsInput = Type.Object(
  {
    id: idOf('merchant (mer_…)'),
    // Decimal inside, opaque outside: the pattern bounds it below 2^63 so it never overflows the column.
    since: Type.Optional(Type.String({ pattern: '^(0|[1-9][0-9]{0,17}|p(0|[1-9][0-9]{0,17}))$', description: 'the `nextSince` (or an item\'s `cursor`) of the previous page; from the start when absent. One past the end of this merchant\'s feed (another merchant\'s, say) is 400 invalid_input' })),
    limit: Type.Optional(
      Type.Integer({ minimum: 1, maximum: REVOCATIONS_PAGE_MAX, default: REVOCATIONS_PAGE_DEFAULT, description: `page size, 1–${REVOCATIONS_PAGE_MAX}` }),
    ),
  },
  { additionalProperties: false },
);

export interface RevocationQueries {
  getFreezeReport: Query<{ id: string }, FreezeReport, unknown>;
  listRevocations: Query<{ id: string; since?: string; limit: number }, RevocationPage, unknown>;
}

export function revocationQueries(revocations: RevocationService, agents: AgentService, merchants: Pick<MerchantService, 'reach'>): RevocationQueries {
  return {
    getFreezeReport: {
      name: 'getFreezeReport',
      input: FreezeReportInput,
      output: Type.Ref('FreezeReport'),
      access: (db, { principal, input }) => agents.agentFor(db, principal, input.id),
      read: (db, { input }) => revocations.latestReport(db, input.id),
    },
    listRevocations: {
      name: 'listRevocations',
      input: RevocationsInput,
      output: Type.Object({
        revocations: Type.Array(Type.Ref('Revocation'), { description: 'oldest first' }),
        nextSince: Type.String({ description: 'pass it as `since` on the next poll: the last item\'s cursor, or the `since` given when nothing is new' }),
        hasMore: Type.Boolean({ description: 'more revocations follow this page: poll again at once with nextSince' }),
      }),
      access: (db, { principal, input }) => merchants.reach(db, principal, input.id),
      read: (db, { input }) => revocations.revocations(db, input.id, input),
    },
  };
}
