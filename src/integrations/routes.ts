// HTTP edge of GET /v1/integrations: the query (queries.ts) answers any authenticated caller.
import type { FastifyInstance } from 'fastify';
import { queryRoute } from '../platform/http/query.ts';
import type { IntegrationQueries } from './queries.ts';

export function integrationRoutes(queries: IntegrationQueries) {
  return async function routes(app: FastifyInstance): Promise<void> {
    app.route(
      queryRoute('GET', '/v1/integrations', queries.getIntegrations, {
        auth: { kinds: ['human', 'agent', 'owner', 'merchant'] },
        tags: ['integrations'],
        summary: 'What this gateway is wired to',
        description: 'Two documented shapes: the live status shape (default, `?view=status`) and the surface shape (`?view=surface`). Never contains a credential.',
      }),
    );
  };
}
