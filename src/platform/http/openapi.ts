// The OpenAPI 3.1 document is generated from the route schemas; this file holds its frame and the
// schemas every route shares (Problem, OAuth error, Microcredits).
import type { FastifyInstance } from 'fastify';
import type { SwaggerOptions } from '@fastify/swagger';
import { Type } from '@sinclair/typebox';
import type { Config } from '../config.ts';
import { ERROR_CATALOGUE } from '../errors.ts';
import { IDEMPOTENCY_KEY_PATTERN } from '../idempotency.ts';
import { MICROCREDITS_PATTERN } from '../money.ts';
import type { OperationDescription } from '../operations.ts';

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
    transform: ({ schema, url, route }) => ({
      schema: documentOperation(schema as Record<string, unknown>, route.config?.operation, route.config?.location === true) as typeof schema,
      url,
    }),
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

const IDEMPOTENCY_KEY_DESCRIPTIONS = {
  required: 'Required. The same key and input answer the stored outcome of the first request; another input under the key is 409 idempotency_key_reused.',
  optional: 'Optional. When sent, the same key and input answer the stored outcome of the first request.',
};

/**
 * The documentation of a route that is a face of an operation, from the operation's definition (never from
 * header validation, so a missing key keeps its own 400): `operationId` is the operation name; the
 * `Idempotency-Key` header parameter with its rule; `Idempotent-Replayed` on the success responses of an
 * idempotent operation; `Location` on a 201 that names the created resource.
 */
export function documentOperation(schema: Record<string, unknown>, operation: OperationDescription | undefined, location: boolean): Record<string, unknown> {
  if (!operation || !schema) return schema;
  const documented: Record<string, unknown> = { ...schema, operationId: schema.operationId ?? operation.name };
  const { key, rule } = operation.idempotency;
  if (key === 'none') return documented;
  documented.headers = {
    type: 'object',
    properties: {
      'Idempotency-Key': {
        type: 'string',
        ...(rule === 'release' ? { minLength: 1, maxLength: 255 } : { pattern: IDEMPOTENCY_KEY_PATTERN.source }),
        description: `${IDEMPOTENCY_KEY_DESCRIPTIONS[key]} ${rule === 'release' ? '1 to 255 visible ASCII characters' : 'For example a UUID'}; the RFC 8941 quoted form is accepted as the same key. Missing: 400 ${operation.idempotency.missingCode ?? 'idempotency_required'}; malformed: 400 invalid_input.`,
      },
    },
    ...(key === 'required' ? { required: ['Idempotency-Key'] } : {}),
  };
  const responses = (schema.response ?? {}) as Record<string, Record<string, unknown>>;
  documented.response = Object.fromEntries(
    Object.entries(responses).map(([status, response]) => {
      if (!/^2\d\d$/.test(status)) return [status, response];
      const headers: Record<string, unknown> = {
        'Idempotent-Replayed': { type: 'string', enum: ['true'], description: 'present when this is the stored outcome of an earlier request with the same key' },
      };
      if (status === '201' && location) headers.Location = { type: 'string', format: 'uri-reference', description: 'the created resource' };
      return [status, { ...response, headers }];
    }),
  );
  return documented;
}
