// The OpenAPI 3.1 document is generated from the route schemas; this file holds its frame and the
// schemas every route shares (Problem, OAuth error, Microcredits).
import type { FastifyInstance } from 'fastify';
import type { SwaggerOptions } from '@fastify/swagger';
import { Type } from '@sinclair/typebox';
import type { Config } from '../config.ts';
import { ERROR_CATALOGUE } from '../errors.ts';
import { MICROCREDITS_PATTERN, UC_DIGITS_MAX } from '../money.ts';

export const ProblemSchema = Type.Object(
  {
    type: Type.String({ description: 'URI of the problem type; dereferences to the error catalogue' }),
    title: Type.String(),
    status: Type.Integer(),
    code: Type.String({ enum: Object.keys(ERROR_CATALOGUE), description: 'stable machine-readable code' }),
    detail: Type.Optional(Type.String()),
  },
  { $id: 'Problem', additionalProperties: true, description: 'RFC 9457 problem details; some codes add members' },
);

export const OAuthErrorSchema = Type.Object(
  {
    error: Type.String({
      enum: [
        'invalid_request', 'invalid_client', 'invalid_grant', 'invalid_scope', 'invalid_target', 'invalid_redirect_uri',
        'invalid_client_metadata', 'unsupported_grant_type', 'access_denied', 'temporarily_unavailable',
      ],
    }),
    error_description: Type.String(),
  },
  { $id: 'OAuthError' },
);

export const MicrocreditsSchema = Type.String({
  $id: 'Microcredits',
  pattern: MICROCREDITS_PATTERN,
  maxLength: UC_DIGITS_MAX,
  description: 'integer microcredits as a decimal string; 1 credit = 1,000,000 µc = $0.01',
});

export const ProblemRef = Type.Ref('Problem');
export const OAuthErrorRef = Type.Ref('OAuthError');

/** Response schemas for the listed failure statuses, all problem bodies. */
export function problems(...statuses: number[]): Record<number, typeof ProblemRef> {
  return Object.fromEntries(statuses.map((s) => [s, ProblemRef]));
}

export function registerSharedSchemas(app: FastifyInstance): void {
  app.addSchema(ProblemSchema);
  app.addSchema(OAuthErrorSchema);
  app.addSchema(MicrocreditsSchema);
}

export function openApiOptions(config: Config): SwaggerOptions {
  return {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Agent Credit Gateway',
        version: '1.0.0',
        description:
          'Software agents pay for and use services with prepaid credit. Amounts are microcredits as decimal strings ' +
          '(1 credit = 1,000,000 µc = $0.01). Timestamps are Unix seconds. Errors are RFC 9457 problem bodies ' +
          '(OAuth routes use the RFC 6749 error body); the error catalogue is at /docs/errors.',
      },
      servers: [{ url: config.baseUrl }],
      components: {
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', description: 'Human session JWT, agent JWT, OAuth access token or merchant API key' },
        },
      },
    },
    refResolver: {
      buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`),
    },
  };
}

/**
 * Marks a feature plugin as sharing the root scope (like fastify-plugin), so the resource schemas it
 * adds (`Redemption`, `Agent`, …) can be referenced by other features' routes.
 */
export function sharesSchemas<T extends (...args: never[]) => unknown>(plugin: T): T {
  (plugin as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;
  return plugin;
}
