// The gateway's public signing keys, for merchants verifying vouchers offline and for resource
// servers verifying our access tokens.
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import { problems } from '../platform/http/openapi.ts';

const Jwks = Type.Object({ keys: Type.Array(Type.Record(Type.String(), Type.Unknown())) });

export async function keysRoutes(app: FastifyInstance): Promise<void> {
  app.get('/.well-known/jwks.json', {
    schema: { operationId: 'getJwks',
      tags: ['discovery'],
      summary: "The gateway's public ES256 keys (JWK Set)",
      response: { 200: Jwks, ...problems(503) },
    },
    handler: async (_request, reply) => {
      reply.header('cache-control', 'public, max-age=300');
      return app.gateway.signing.jwks();
    },
  });
}
