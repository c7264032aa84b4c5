// Operator routes: what an operator does to a running gateway with the operator credential (never an
// owner's, agent's or merchant's). Today: credit grants, the same ledger operation as `acg credit grant`
// on a stopped gateway.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { LotSchema } from '../ledger/routes.ts';
import { GRANT_NOTE_CHARS_MAX, GRANT_PRIORITY_MAX, type LedgerService } from '../ledger/service.ts';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { Microcredits, ResourceId, UnixSeconds } from '../platform/schemas.ts';
import { parseUc } from '../platform/money.ts';
import type { SingleStepOperation } from '../platform/operations.ts';
import type { Principal } from '../platform/principal.ts';
import { checkOperator } from './credential.ts';

const GrantBody = Type.Object(
  {
    agentId: ResourceId,
    amountUc: Microcredits('amount to add, > 0'),
    expiresAt: Type.Optional(UnixSeconds('when the unspent remainder lapses; default never')),
    priority: Type.Optional(Type.Integer({ minimum: 0, maximum: GRANT_PRIORITY_MAX, description: 'burn-down priority, lower is spent first; default 100' })),
    note: Type.Optional(Type.String({ minLength: 1, maxLength: GRANT_NOTE_CHARS_MAX, description: 'why the grant was made (the lot source reference); default "operator grant"' })),
  },
  { additionalProperties: false, examples: [{ agentId: 'agt_01J…', amountUc: '5000000', note: 'welcome credit' }] },
);

/** Whoever presents the operator credential: one principal, so its Idempotency-Keys share one scope. */
const OPERATOR: Principal = { kind: 'operator', id: 'operator', scopes: [], credential: 'operator_token' };

type GrantCredit = SingleStepOperation<Static<typeof GrantBody>, { lot: Awaited<ReturnType<LedgerService['grant']>> }>;

export function operatorOperations(ledger: LedgerService): { grantCredit: GrantCredit } {
  return {
    grantCredit: {
      name: 'grantCredit',
      input: GrantBody,
      idempotency: { key: 'required' },
      run: async (tx, { input }) => ({
        lot: await ledger.grant(tx, {
          agentId: input.agentId,
          amountUc: parseUc(input.amountUc),
          priority: input.priority,
          expiresAtS: input.expiresAt ?? null,
          source: 'grant',
          sourceRef: input.note ?? 'operator grant',
        }),
      }),
    },
  };
}

/** `acceptedHash`: the SHA-256 of the operator credential; undefined when none is configured (live mode). */
export function operatorRoutes(deps: { ledger: LedgerService; acceptedHash: string | undefined }) {
  return async function routes(app: FastifyInstance): Promise<void> {
    const { grantCredit } = operatorOperations(deps.ledger);
    app.addHook('onRequest', async (request) => {
      checkOperator(request.headers.authorization, deps.acceptedHash);
      request.principal = OPERATOR;
    });

    app.post('/v1/operator/credit-grants', {
      config: { operation: grantCredit },
      schema: {
        tags: ['operator'],
        summary: 'Grant credit to an agent (operator)',
        description:
          'Adds a credit lot to any agent, journaled like every ledger change; what `acg credit grant` sends to a running gateway. ' +
          'Authentication: the operator credential (dev mode: ACG_DATA_DIR/operator-token; live mode: only a credential whose SHA-256 is ' +
          'ACG_OPERATOR_TOKEN_SHA256, else 503). Idempotency-Key required.',
        security: [{ operator: [] }],
        body: GrantBody,
        response: { 201: Type.Object({ lot: LotSchema }), ...problems(400, 401, 404, 409, 503) },
      },
      handler: (request, reply) => serve(request, reply, grantCredit, request.body as Static<typeof GrantBody>, { status: 201 }),
    });
  };
}
