// HTTP edge of delegation: register a delegate, read a subtree, retire a delegate.
import type { FastifyInstance } from 'fastify';
import type { Static } from '@sinclair/typebox';
import { Type } from '@sinclair/typebox';
import { principalOf } from '../platform/http/auth.ts';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { queryRoute } from '../platform/http/query.ts';
import { AgentIdParams, EmptyBody } from '../platform/schemas.ts';
import { DelegateCreate, type DelegationOperations } from './operations.ts';
import type { DelegationQueries } from './queries.ts';

const OWNER = { kinds: ['human', 'owner'] } as const;
const AGENT_OR_OWNER = { kinds: ['agent', 'human', 'owner'] } as const;
const AGENT = { kinds: ['agent'] } as const;

const TREE_DESCRIPTION =
  "Each node is an Agent (with parentId and depth) and its budgets' usage now, as GET …/mandate shows it: what each budget's current period allows, " +
  "has spent and has left, and when it resets. A parent's budgets count its delegates' holds, which a child's hold charges in the same transaction.";

export function delegationRoutes(deps: { operations: DelegationOperations; queries: DelegationQueries }) {
  const { operations: ops, queries } = deps;
  return async function routes(app: FastifyInstance): Promise<void> {
    const tags = ['delegation'];

    app.post('/v1/agents/:id/delegates', {
      config: { auth: AGENT_OR_OWNER, operation: ops.createDelegate, location: true },
      schema: {
        tags,
        summary: 'Register a delegate (a child agent) under a mandate within its parent\'s',
        description:
          'By the parent agent itself (an agent credential, its own id) or by its owner. The delegate belongs to the same owner, records parentId and depth, ' +
          "and authenticates with its own identity. Its holds allocate from its root's credit lots (a delegate owns no lots: grants and top-ups go to the root) " +
          'and are checked against, and charged to, the budgets of the delegate and of every ancestor, in the same transaction. Refused with 400 invalid_input, ' +
          "nothing created, `reason`: delegation_not_allowed (the parent's mandate has delegation.allowed false), depth_exceeded (deeper than an ancestor's " +
          'delegation.maxDepth allows, or delegation.maxDepth not below the parent\'s), budget_wider_than_parent, cap_wider_than_parent (a per-hold or rolling cap ' +
          "none or above the parent's, or a rolling cap over a shorter period), approval_wider_than_parent (an approval threshold none or above the parent's), " +
          'merchant_outside_parent, window_outside_parent, allowance_outside_parent; for a mandate wider than the parent mandate (each of these, and depth_exceeded by its own delegation.maxDepth), `pointer` names the delegate\'s member that is wider (RFC 6901, ' +
          "into its mandate: /budgets/1/limitUc) and `parent` the parent's member it is held to ({agentId, pointer, value}: the parent's budget, cap, " +
          'time zone, merchant rule, … as its GET …/mandate shows it); those name the first rule that is wider, and `wider` lists every one, each as {reason, detail, pointer, parent}. The same check applies to every later change of the delegate\'s mandate (PUT …/mandate, PATCH). ' +
          "`Location` names what the caller can read: the owner's view of the delegate (/v1/owner/agents/{id}) for the owner, the delegate's subtree (/v1/agents/{id}/delegates) for the parent agent. 403 FROZEN " +
          '(`reason` frozen, `agentId` the frozen one) while the parent or an ancestor is frozen; 409 for a retired parent. Requires Idempotency-Key.',
        params: AgentIdParams,
        body: DelegateCreate,
        response: { 201: Type.Ref('Agent'), ...problems(400, 403, 404, 409, 503), 400: Type.Ref('MandateProblem') },
      },
      handler: (request, reply) =>
        serve(request, reply, ops.createDelegate, { ...(request.body as Static<typeof DelegateCreate>), id: (request.params as { id: string }).id }, {
          status: 201,
          // What the caller can read: the owner its view of the delegate, the parent agent the delegate's subtree.
          headers: (agent) => ({ location: principalOf(request).kind === 'agent' ? `/v1/agents/${agent.id}/delegates` : `/v1/owner/agents/${agent.id}` }),
        }),
    });

    app.route(
      queryRoute('GET', '/v1/owner/agents/:id/delegates', queries.listDelegates, {
        auth: OWNER,
        tags,
        summary: "Read an agent's subtree: it and its delegates, with each one's budget usage",
        description: TREE_DESCRIPTION,
        errors: [404],
      }),
    );
    app.route(
      queryRoute('GET', '/v1/agents/:id/delegates', queries.listOwnDelegates, {
        auth: AGENT,
        tags,
        summary: 'Read your own subtree (an agent credential): yourself or one of your delegates, and the delegates below',
        description: `${TREE_DESCRIPTION} An agent reads the subtree of itself or of any agent below it; any other id is 404.`,
        errors: [404],
      }),
    );

    app.post('/v1/owner/agents/:id/retire', {
      config: { auth: OWNER, operation: ops.retireAgent },
      schema: {
        tags,
        summary: 'Retire a delegate and every delegate below it',
        description:
          "Releases every open hold of the subtree (their credit back to the root's lots, their budgets given back, `redemption.released` to each merchant), " +
          'revokes their vouchers as a freeze with releaseHolds does (each holding merchant gets one `voucher.revoked`, reason agent_retired, its revocations ' +
          'feed lists them, and a capture of one answers 409 voucher_revoked), cancels the execute intents they retained (`cancellationReason` ' +
          'agent_retired) and marks the subtree retired, in one transaction: a retired agent spends no more (403 FROZEN, `reason` retired), for good. What the subtree did ' +
          'not spend was never moved out of the root\'s lots, so nothing else returns. The owner only; a root agent is frozen, not retired (409). Retiring a ' +
          'retired delegate answers it unchanged. No body, or `{}` (a member is 400). Requires Idempotency-Key.',
        params: AgentIdParams,
        body: EmptyBody,
        response: { 200: Type.Ref('Retirement'), ...problems(400, 403, 404, 409) },
      },
      handler: (request, reply) => serve(request, reply, ops.retireAgent, { id: (request.params as { id: string }).id }),
    });
  };
}
