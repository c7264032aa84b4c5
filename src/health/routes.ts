// Liveness, readiness and metrics for orchestrators and Prometheus.
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { Database } from '../platform/db/database.ts';
import { schemaState, type SchemaState } from '../platform/db/migrate.ts';
import { describeStorage } from '../platform/db/open.ts';
import { metricsTakeCredential } from '../platform/config.ts';
import { ApiError } from '../platform/errors.ts';
import { problems } from '../platform/http/openapi.ts';
import { healthBody } from '../platform/http/front-door.ts';

/** /readyz answers within 1 s whatever the database does: a check still running then counts as "not ready". */
const READY_CHECK_BUDGET_MS = 500;

/** The schema check, failing once the budget is spent (the query itself still ends on its own database timeouts). */
function schemaStateWithin(db: Database, budgetMs: number): Promise<SchemaState> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`the database did not answer within ${budgetMs} ms`)), budgetMs);
  });
  return Promise.race([schemaState(db), late]).finally(() => clearTimeout(timer));
}

import { checkHashedBearer } from '../platform/hashed-credential.ts';

const Health = Type.Object({
  status: Type.String({ enum: ['ok'] }),
  mode: Type.String({ enum: ['dev', 'live'], description: 'The mode the gateway runs in; said without asking the database, so it answers while that is away' }),
});
const Ready = Type.Object({ status: Type.String({ enum: ['ready'] }), storage: Type.String(), mode: Type.String() });

export async function healthRoutes(app: FastifyInstance): Promise<void> {
  const { db, config, metrics } = app.gateway;

  app.get('/healthz', {
    config: { skipRateLimit: true },
    schema: { operationId: 'getHealth', tags: ['operations'], summary: 'Liveness: the process answers, and the mode it runs in', response: { 200: Health } },
    handler: async () => healthBody(config),
  });

  app.get('/readyz', {
    config: { skipRateLimit: true },
    schema: { operationId: 'getReadiness',
      tags: ['operations'],
      summary: 'Readiness: the database answers (within 1 s) and every migration is applied',
      response: { 200: Ready, ...problems(503) },
    },
    handler: async () => {
      let schema: SchemaState;
      try {
        schema = await schemaStateWithin(db, READY_CHECK_BUDGET_MS);
      } catch {
        throw new ApiError('storage_unavailable', { detail: 'the database does not answer' });
      }
      if (schema.state === 'behind') throw new ApiError('storage_unavailable', { detail: 'migrations are not all applied; run `acg migrate`' });
      if (schema.state === 'none') throw new ApiError('storage_unavailable', { detail: 'the database holds no gateway schema; run `acg migrate`' });
      // An instance of an older release, still running after a newer one migrated the database: out of the load
      // balancer's rotation, so it stops taking writes it would store in the older form.
      if (schema.state === 'newer') throw new ApiError('storage_unavailable', { detail: schema.refusal });
      return { status: 'ready', storage: describeStorage(db), mode: config.mode };
    },
  });

  // Open only in dev mode without a configured credential: the figures tell business activity per operation.
  const scrapeCredential = metricsTakeCredential(config);
  app.get('/metrics', {
    config: { skipRateLimit: true },
    schema: {
      operationId: 'getMetrics',
      tags: ['operations'],
      summary: 'Prometheus metrics (text exposition format)',
      description:
        'With ACG_METRICS_TOKEN_SHA256 set, and always in live mode, it requires `Authorization: Bearer <scrape credential>` (Prometheus ' +
        '`authorization.credentials`): 401 otherwise, and to every scrape in live mode without the setting. Dev mode without it serves it openly.',
      response: {
        200: { description: 'the metrics, in the Prometheus text exposition format', content: { [metrics.registry.contentType]: { schema: { type: 'string' } } } },
        ...(scrapeCredential ? problems(401) : {}),
      },
      ...(scrapeCredential ? { security: [{ metrics: [] }] } : {}),
      hide: false,
    },
    handler: async (request, reply) => {
      if (scrapeCredential) checkHashedBearer(request.headers.authorization, config.metricsTokenSha256, { realm: 'metrics', name: 'scrape credential' });
      reply.type(metrics.registry.contentType);
      return metrics.registry.metrics();
    },
  });
}
