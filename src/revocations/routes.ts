// HTTP edge of the kill switch: freezing an agent (optionally releasing and revoking its subtree's holds), the
// freeze report, and a merchant's revocations feed. Routes translate; the rules live in the service.
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { queryRoute } from '../platform/http/query.ts';
import { AgentIdParams } from '../platform/schemas.ts';
import { FreezeBody, type RevocationOperations } from './operations.ts';
import type { RevocationQueries } from './queries.ts';
import { REVOCATIONS_PAGE_DEFAULT, REVOCATIONS_PAGE_MAX } from './service.ts';

const OWNER = { kinds: ['human', 'owner'] } as const;

export function revocationRoutes(ops: RevocationOperations, queries: RevocationQueries) {
  return async function routes(app: FastifyInstance): Promise<void> {
    app.post('/v1/owner/agents/:id/freeze', {
      config: { auth: OWNER, operation: ops.freezeAgent },
      schema: {
        tags: ['identity'],
        summary: 'Freeze an agent and its delegates; optionally release and revoke their outstanding holds',
        description:
          'The agent can no longer spend (403 FROZEN), nor can any of its delegates: each is refused at its next request. ' +
          'Without `releaseHolds` (the default) the holds already taken stay as they are: a merchant holding a voucher can still ' +
          'capture it, as a card\'s pending authorizations still settle after the card is frozen, though POST /v1/access/merchant-check ' +
          'answers allowed: false for the agent. ' +
          'In the same transaction every execute intent they retained is cancelled (`cancellationReason` agent_frozen, one ' +
          '`intent.cancelled` each), so none runs by itself later, even once unfrozen (a retry with its key asks again). ' +
          'With `releaseHolds: true`, also in that transaction, every outstanding hold of the agent and its delegates is ' +
          'released (its credit back to the lots, its budgets given back) and its voucher revoked: each merchant holding one ' +
          'gets one signed `voucher.revoked` webhook event listing its holds, its revocations feed (GET /v1/merchants/{id}/revocations) ' +
          'lists them, and a capture of one answers 409 voucher_revoked. The answer is the agent, as before, with a `freeze` member: the report of each merchant ' +
          'reached and the delivery state of its event, with when its next attempt is due while it waits (`nextAttemptAt`, a merchant\'s open circuit included; read it again later with GET). Freezing a frozen agent without releaseHolds ' +
          'changes nothing and answers its latest report; with releaseHolds it releases what is held now and makes a report of its own, whose ' +
          '`frozenAt` is that second freeze, not when the agent stopped spending (it stayed frozen since the first), unless it finds nothing to release after a freeze that released: it then answers that freeze\'s report (a double click, a retry under a new key); a retired delegate is not frozen (409 conflict: retirement already stopped it for good). The body is optional (none is `{}`). Idempotency-Key is honoured when sent.',
        params: AgentIdParams,
        body: FreezeBody,
        response: { 200: Type.Ref('FrozenAgent'), ...problems(400, 404, 409) },
      },
      handler: (request, reply) => serve(request, reply, ops.freezeAgent, { ...(request.body as FreezeBody), id: (request.params as { id: string }).id }),
    });

    app.route(
      queryRoute('GET', '/v1/owner/agents/:id/freeze', queries.getFreezeReport, {
        auth: OWNER,
        tags: ['identity'],
        summary: "Read an agent's latest freeze report: how far it reached",
        description:
          'What the latest freeze released, and for each merchant that held a revoked voucher its holds and where its `voucher.revoked` ' +
          'event stands now (`delivered`, `pending`, `failing`, `disabled`, `paused`, `none`), and while its delivery waits when the next attempt ' +
          "is due (`nextAttemptAt`: the end of the merchant's open circuit when that is later than its schedule). 404 when the agent was never frozen.",
        errors: [404],
      }),
    );

    app.route(
      queryRoute('GET', '/v1/merchants/:id/revocations', queries.listRevocations, {
        auth: { kinds: ['human', 'owner', 'merchant'], scopes: ['offers:read'] },
        tags: ['revocations'],
        summary: 'List the revoked vouchers of your holds (a feed to poll)',
        description:
          'Every hold of this merchant whose voucher a freeze or a retirement revoked, oldest first: refuse a voucher whose `jti` is listed. For a ' +
          'merchant without a webhook, or as a check beside it. Poll with `since` set to the previous answer\'s `nextSince` (absent: ' +
          `from the start); \`limit\` 1–${REVOCATIONS_PAGE_MAX}, default ${REVOCATIONS_PAGE_DEFAULT}; \`hasMore\` says to poll again at once. ` +
          'Cursors are opaque. The feed is kept as long as the holds are. An API key needs the scope `offers:read`.',
        errors: [400, 404],
      }),
    );
  };
}
