// POST /v1/access/merchant-check: the HTTP face of the merchant check query (./queries.ts).
import type { FastifyInstance } from 'fastify';
import { queryRoute } from '../platform/http/query.ts';
import { PRICE_PROBES_MAX } from './price-probes.ts';
import type { AccessQueries } from './queries.ts';

export function accessRoutes(queries: AccessQueries) {
  return async function routes(app: FastifyInstance): Promise<void> {
    app.route(
      queryRoute('POST', '/v1/access/merchant-check', queries.checkMerchantAccess, {
        auth: { kinds: ['merchant'], scopes: ['access:check'] },
        tags: ['access'],
        summary: 'Check whether an agent identity may use one of your offers',
        description:
          'Creates no registration, grant, hold, capture or fee; the answer holds no owner identity or balance. 404 when the offer is not an active offer of your merchant, or your merchant has not proved its domain yet (its offers are not for sale, so nothing of the agent is answered), or no agent is registered for the identity, or more than one owner ' +
          'registered it (the question names no owner; the agent\'s own token names its owner). 429 rate_limited also when this merchant asked about this agent, whose mandate or an ancestor\'s has caps or budgets, at more than ' +
          `${PRICE_PROBES_MAX} different prices within an hour (a price asked before is always answered), so that answers at prices the merchant sets cannot add up to the owner's budget or cap figures.`,
        errors: [400, 404],
      }),
    );
  };
}
