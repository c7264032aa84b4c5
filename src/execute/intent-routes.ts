// GET /v1/intents/{id}: a retained intent, its state and, once it ran, its result and receipt.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { principalOf } from '../platform/http/auth.ts';
import { problems, sharesSchemas } from '../platform/http/openapi.ts';
import { IdParams, Microcredits, Nullable, UnixSeconds } from '../platform/schemas.ts';
import type { ExecuteService } from './service.ts';

const IntentViewSchema = Type.Object(
  {
    id: Type.String(),
    state: Type.String({
      enum: ['pending', 'executed', 'failed', 'cancelled'],
      description: 'pending (waiting for credit) → executed (ran, charged once) | failed (ran, failed definitively, not charged) | cancelled (its top-up was declined, expired or failed; not charged)',
    }),
    agentId: Type.String(),
    intent: Type.Ref('ServiceIntent'),
    priceUc: Microcredits('the price of the execution'),
    executionId: Nullable(Type.String()),
    cancellationReason: Nullable(Type.String({ enum: ['topup_declined', 'topup_expired', 'topup_failed'] })),
    result: Nullable(Type.Object({}, { additionalProperties: true, description: "the action's result while the execute answer is retained (24 h by default)" })),
    receipt: Nullable(Type.Ref('Redemption')),
    error: Nullable(Type.Object({}, { additionalProperties: true, description: 'the problem body of a failed intent, while retained' })),
    createdAt: UnixSeconds('creation'),
    updatedAt: UnixSeconds('last change'),
    expiresAt: UnixSeconds('a pending intent is dropped at'),
  },
  { $id: 'IntentStatus', description: 'A retained intent and its outcome' },
);

export function intentRoutes(execute: ExecuteService) {
  return sharesSchemas(async function routes(app: FastifyInstance): Promise<void> {
    app.addSchema(IntentViewSchema);
    app.get('/v1/intents/:id', {
      config: { auth: { kinds: ['human', 'agent', 'owner'] } },
      schema: {
        operationId: 'getIntent',
        tags: ['services'],
        summary: 'Read a retained intent and its outcome',
        description:
          "Its agent and that agent's owner may read it; anyone else gets 404. After its top-up settles the gateway runs it once by " +
          'itself; a retry of the original execute request with its Idempotency-Key answers the same outcome.',
        params: IdParams,
        response: { 200: Type.Ref('IntentStatus'), ...problems(404) },
      },
      handler: async (request) => execute.readIntent(principalOf(request), (request.params as Static<typeof IdParams>).id),
    });
  });
}
