// Operator routes: what an operator does to a running gateway with the operator credential (never an
// owner's, agent's or merchant's). Today: credit grants, the same ledger operation as `acg credit grant`
// on a stopped gateway.
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { GrantCreditInput, LedgerOperations } from '../ledger/operations.ts';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { OPERATOR_PRINCIPAL } from '../platform/principal.ts';
import { checkOperator } from './credential.ts';

/** `acceptedHash`: the SHA-256 of the operator credential; undefined when none is configured (live mode). */
export function operatorRoutes(deps: { grantCredit: LedgerOperations['grantCredit']; acceptedHash: string | undefined }) {
  const { grantCredit } = deps;
  return async function routes(app: FastifyInstance): Promise<void> {
    app.addHook('onRequest', async (request) => {
      checkOperator(request.headers.authorization, deps.acceptedHash);
      request.principal = OPERATOR_PRINCIPAL;
    });

    app.post('/v1/operator/credit-grants', {
      config: { operation: grantCredit },
      schema: {
        tags: ['operator'],
        summary: 'Grant credit to an agent (operator)',
        description:
          'Adds a credit lot to any agent, journaled like every ledger change; what `acg credit grant` sends to a running gateway. ' +
          'Authentication: the operator credential (dev mode: ACG_DATA_DIR/operator-token; live mode: only a credential whose SHA-256 is ' +
          'ACG_OPERATOR_TOKEN_SHA256). No, a malformed or a wrong credential answers 401 with `WWW-Authenticate: Bearer realm="operator"`, ' +
          'before anything else and whether or not a credential is configured (without one, every call is 401; the start-up log says so). ' +
          "A grant that would carry the agent's lifetime credit past 10^18 − 1 µc is 409 conflict (reason amount_limit). Idempotency-Key required.",
        security: [{ operator: [] }],
        body: grantCredit.input,
        response: { 201: Type.Object({ lot: Type.Ref('Lot') }), ...problems(400, 401, 404, 409, 503) },
      },
      handler: (request, reply) => serve(request, reply, grantCredit, request.body as GrantCreditInput, { status: 201 }),
    });
  };
}
