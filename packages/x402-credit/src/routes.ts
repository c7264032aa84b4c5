// A merchant's prices, checked where the merchant states them. x402's middlewares ask the scheme for a route's
// price only when they first build its requirements (@x402/express and @x402/hono 2.27: at the route's first
// request), and no hook of x402's shows the scheme a route before that: a price this scheme refuses (finer than one
// microcredit, zero, unreadable) was a 500 at the first request, in the merchant's log only (found from outside).
// So the merchant's routes pass through `checkCreditRoutes` at start-up, and `paidTool` checks its price when the
// tool is wrapped; what still reaches x402 unchecked is refused at its request with the same words (server.ts).
import type { PaymentOption, RouteConfig, RoutesConfig } from '@x402/core/http';
import type { Price } from '@x402/core/types';
import { CREDIT_NETWORK, CREDIT_SCHEME } from './constants.js';
import { CreditError, refusalWords } from './errors.js';
import { parseCreditPrice } from './money.js';

/** Throws `invalid_price` naming `where` the price was stated (`route "GET /report"`, `tool "analyse"`) when this scheme cannot charge it. */
export function checkCreditPrice(where: string, price: Price): void {
  try {
    parseCreditPrice(price);
  } catch (error) {
    if (!(error instanceof CreditError)) throw error;
    throw new CreditError('invalid_price', `${where}: ${refusalWords(error)}`);
  }
}

/**
 * Checks the credit prices of x402 routes as the merchant states them, and returns the routes unchanged: a price
 * this scheme refuses throws `CreditError('invalid_price')` naming each such route and its price, where the app
 * starts, instead of failing the route's first request. A price x402 computes per request (a function) is checked
 * when x402 asks for it. Use it where the routes go to x402:
 * `paymentMiddleware(checkCreditRoutes({ 'GET /report': { accepts } }), creditResourceServer(merchant))`.
 */
export function checkCreditRoutes<Routes extends RoutesConfig>(routes: Routes): Routes {
  // x402's own reading of a routes config: one route config (it has `accepts`) protects every path.
  const entries: Array<[string, RouteConfig]> = 'accepts' in routes ? [['*', routes as RouteConfig]] : Object.entries(routes as Record<string, RouteConfig>);
  const refusals: string[] = [];
  for (const [pattern, route] of entries) {
    for (const option of ([] as PaymentOption[]).concat(route.accepts)) {
      if (option.scheme !== CREDIT_SCHEME || option.network !== CREDIT_NETWORK || typeof option.price === 'function') continue;
      try {
        checkCreditPrice(`route "${pattern}"`, option.price);
      } catch (error) {
        if (!(error instanceof CreditError)) throw error;
        refusals.push(refusalWords(error));
      }
    }
  }
  if (refusals.length > 0) throw new CreditError('invalid_price', refusals.join('; '));
  return routes;
}
