// HTTP edge of payments: top-ups (/v1/payments/topups…), purchase approvals (/v1/payments/purchases…), the
// owner's list of approvals (/v1/owner/approvals), the local approval pages (/payments/topups/{id},
// /payments/purchases/{id}) and the configured rail's notification endpoint (Stripe's webhook,
// /v1/payments/stripe/webhook), if it has one.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { ApiError } from '../platform/errors.ts';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { queryRoute } from '../platform/http/query.ts';
import { EmptyBody, IdParams } from '../platform/schemas.ts';
import { HtmlPage, newNonce, pageHeaders } from '../platform/http/pages.ts';
import { RequestTopupInput, type PaymentOperations } from './operations.ts';
import { approvalPage, invalidLinkPage, type ApprovalPageKind } from './page.ts';
import { PURCHASE_APPROVAL_LIFETIME_S } from './purchases.ts';
import type { PaymentQueries } from './queries.ts';
import type { RailNotifications } from './rails/rail.ts';
import { AUTOMATIC_TOPUP_USD_CENTS, PENDING_TOPUPS_PER_AGENT_MAX, type PaymentsService } from './service.ts';

const PURCHASE_TEXT =
  "A purchase (a voucher mint or an execute) above the agent's mandate `approvalAboveUc` answers 402 approval_required with " +
  '`approvalUrl` (this approval\'s page), `intentId` and `intent`, and takes nothing; the owner approves or declines here. The approval ' +
  'belongs to that request (its Idempotency-Key, its input, the agent, the amount): after approval the retry with the same key takes ' +
  'the hold, once, and uses the approval in the same transaction. Statuses: `pending_approval` → `approved` → `used` | `expired`; ' +
  '`pending_approval` → `declined` | `expired`; `approved` → `declined` (withdrawn before use); `pending_approval` → `used` when ' +
  'the retry took the hold without it because the mandate no longer asks (`decidedAt` null). ' +
  `The owner has ${PURCHASE_APPROVAL_LIFETIME_S / 60} minutes to answer, and the approved request as long again to be retried. No payment provider is needed.`;

const STATUS_TEXT =
  'Statuses: `pending_approval` → `settled` (credited: one lot of source `topup`) | `declined` (by the owner) | `expired` ' +
  '(24 h locally; the Checkout Session expiry plus 1 h with Stripe; at once when a freeze or retirement cancels its retained intent, ' +
  'and a payment collected afterwards still credits) | `failed` (the provider reported a failed payment). ' +
  'Every state but `pending_approval` is final.';

export interface PaymentRouteDeps {
  /** Without a rail, reads still answer; creating, approving and declining answer 503 payment_unavailable. */
  payments: PaymentsService;
  /** The same objects the MCP face runs (request_topup is requestTopup). */
  operations: PaymentOperations;
  queries: PaymentQueries;
  /** Dev mode's built-in human issuer login, for the approval page. */
  devLoginUrl?: string;
  humanIssuer?: string;
  /** The catalogue's service titles by id, for the approval page. */
  serviceTitles: Readonly<Record<string, string>>;
}

/** The API refuses approve/decline from a page of another origin (the bearer token already rules out CSRF). */
function checkOrigin(request: FastifyRequest, baseUrl: string): void {
  const origin = request.headers.origin;
  if (origin !== undefined && origin !== new URL(baseUrl).origin) {
    throw new ApiError('forbidden', { detail: 'approve and decline are accepted only from the gateway\'s own pages or from clients that send no Origin' });
  }
}

export function paymentRoutes(deps: PaymentRouteDeps) {
  return async function routes(app: FastifyInstance): Promise<void> {
    const { config } = app.gateway;
    const tags = ['payments'];
    const ANY = { kinds: ['human', 'agent', 'owner'] } as const;
    const HUMAN = { kinds: ['human'] } as const;
    const OWNER = { kinds: ['human', 'owner'] } as const;
    const { payments, operations } = deps;

    app.post('/v1/payments/topups', {
      config: { auth: ANY, operation: operations.requestTopup },
      schema: {
        operationId: 'requestTopup',
        tags,
        summary: 'Request a top-up of an agent from the payment-approval provider',
        description:
          'Opens an approval for the owner: with the `local` provider a gateway page (`approvalUrl`) where the signed-in owner approves ' +
          'or declines; with `stripe` a Checkout Session (`approvalUrl` = `checkoutUrl` = the session URL). 1 US cent buys 1 credit ' +
          '(1,000,000 µc). An agent may top up only itself (403 agent_mismatch), and not while frozen (403 FROZEN; its owner still may); an owner only its own agents (403 owner_required). ' +
          '`intentId` binds a pending retained intent of the agent, which the gateway runs once by itself after settlement (an intent ' +
          `has at most one pending top-up: 409 conflict). Execute requests a top-up of $${(AUTOMATIC_TOPUP_USD_CENTS / 100).toFixed(2)} by itself when credit is short; declining ` +
          'that top-up cancels its retained intent, and a retry of the agent\'s execute request with the same Idempotency-Key reopens ' +
          `the same intent with a new top-up to approve. ` +
          `At most ${PENDING_TOPUPS_PER_AGENT_MAX} top-ups of an agent wait for its owner at once (\`pending_approval\` and not past \`expiresAt\`), ` +
          'whoever asked, execute\'s own included: one more is 409 conflict with `reason` `pending_topups_limit` and `pendingTopupsMax`, ' +
          'and nothing is recorded or opened at the provider. Once the owner approves or declines one, or one expires, a new request (a new ' +
          'Idempotency-Key: the refusal is the answer stored under its key) can take the place; a replay of a top-up already created still ' +
          'answers it. ' +
          `Idempotency-Key required (400 idempotency_required). 503 payment_unavailable without a provider. ${STATUS_TEXT}`,
        body: RequestTopupInput,
        response: { 200: Type.Ref('Topup'), ...problems(400, 403, 409, 503) },
      },
      handler: (request, reply) => serve(request, reply, operations.requestTopup, request.body as Static<typeof RequestTopupInput>),
    });

    app.route(
      queryRoute('GET', '/v1/payments/topups', deps.queries.listTopups, {
        auth: ANY,
        tags,
        summary: "List an agent's top-ups (oldest first)",
        description:
          'An agent lists its own (agentId optional); an owner names one of its agents (400 invalid_input without it, 403 owner_required for another). ' +
          'Reads need no provider: they answer whatever ACG_PAYMENT_PROVIDER is.',
        errors: [400, 403],
      }),
    );

    app.route(
      queryRoute('GET', '/v1/payments/topups/:id', deps.queries.getTopup, {
        auth: ANY,
        tags,
        summary: 'Read a top-up',
        description: `Its agent and that agent's owner may read it; anyone else gets 404. Needs no provider. ${STATUS_TEXT}`,
        errors: [404],
      }),
    );

    app.post('/v1/payments/topups/:id/approve', {
      config: { auth: HUMAN, operation: operations.approveTopup },
      schema: {
        operationId: 'approveTopup',
        tags,
        summary: 'Approve a pending top-up (local provider; the human owner only)',
        description:
          'Settles at once: one lot (source `topup`) is credited and journaled, and a bound intent is resumed by the gateway. In dev mode ' +
          'it is a test-mode payment (`livemode: false`). Approving a settled top-up again answers it unchanged. 409 conflict for a ' +
          'declined, expired or failed top-up, or one paid at Stripe Checkout. Only a human owner session (H) may approve: an OAuth ' +
          'owner token may be held by an application. A request with an `Origin` other than the gateway\'s is refused (403 forbidden). ' +
          'Idempotency-Key honoured when sent.',
        params: IdParams,
        body: EmptyBody,
        response: { 200: Type.Ref('Topup'), ...problems(403, 404, 409, 503) },
      },
      handler: async (request, reply) => {
        checkOrigin(request, config.baseUrl);
        const { id } = request.params as Static<typeof IdParams>;
        const sent = await serve(request, reply, operations.approveTopup, { id });
        payments.resumeSoon(id);
        return sent;
      },
    });

    app.post('/v1/payments/topups/:id/decline', {
      config: { auth: HUMAN, operation: operations.declineTopup },
      schema: {
        operationId: 'declineTopup',
        tags,
        summary: 'Decline a pending top-up (the human owner only)',
        description:
          'The top-up becomes `declined` and its retained intent is cancelled, nothing charged. A Stripe Checkout Session is expired ' +
          'first, so it can no longer be paid (409 conflict if it already was). Declining again answers it unchanged.',
        params: IdParams,
        body: EmptyBody,
        response: { 200: Type.Ref('Topup'), ...problems(403, 404, 409, 503) },
      },
      handler: (request, reply) => {
        checkOrigin(request, config.baseUrl);
        return serve(request, reply, operations.declineTopup, { id: (request.params as Static<typeof IdParams>).id });
      },
    });

    const page = (kind: ApprovalPageKind) => async (request: FastifyRequest, reply: FastifyReply) => {
      const nonce = newNonce();
      reply.headers(pageHeaders(nonce));
      if (request.validationError) return reply.code(400).send(invalidLinkPage(nonce, kind));
      const { id } = request.params as Static<typeof IdParams>;
      return approvalPage(nonce, { kind, id, devLoginUrl: deps.devLoginUrl, humanIssuer: deps.humanIssuer, serviceTitles: deps.serviceTitles });
    };

    app.get('/payments/topups/:id', {
      attachValidation: true,
      schema: {
        operationId: 'showTopupApprovalPage',
        tags,
        summary: 'The approval page of a top-up (HTML)',
        description: 'The owner signs in here, sees the agent, the amount, the reason and the retained intent, and approves or declines.',
        params: IdParams,
        response: { 200: HtmlPage('the approval page'), 400: HtmlPage('a link whose id cannot name an approval') },
      },
      handler: page('topup'),
    });

    app.route(
      queryRoute('GET', '/v1/payments/purchases/:id', deps.queries.getPurchaseApproval, {
        auth: ANY,
        tags,
        summary: 'Read a purchase approval',
        description:
          "Its agent and that agent's owner may read it (an agent polls it for the owner's answer); anyone else gets 404. Past its " +
          `deadline an open approval is closed as it is read. ${PURCHASE_TEXT}`,
        errors: [404],
      }),
    );

    app.post('/v1/payments/purchases/:id/approve', {
      config: { auth: HUMAN, operation: operations.approvePurchase },
      schema: {
        operationId: 'approvePurchase',
        tags,
        summary: "Approve a purchase above the agent's approval threshold (the human owner only)",
        description:
          'The approval becomes `approved` (event `purchase.approved`): the agent\'s retry of the same request, with the same ' +
          `Idempotency-Key, takes the hold within ${PURCHASE_APPROVAL_LIFETIME_S / 60} minutes. Nothing is taken by the approval itself. Approving an approved ` +
          'purchase again answers it unchanged; 409 conflict for a declined, expired or used one (`reason` purchase_declined, approval_expired or approval_used, with `approvalId`, `intentId` and `purchase`, as the agent\'s retry says), and for an agent that is frozen or ' +
          'retired, or below one (`reason` agent_frozen or agent_retired, `agentId`; the approval stays pending). Only a human owner session (H) may ' +
          'approve; a request with an `Origin` other than the gateway\'s is refused (403 forbidden). Idempotency-Key honoured when sent.',
        params: IdParams,
        body: EmptyBody,
        response: { 200: Type.Ref('PurchaseApproval'), ...problems(403, 404, 409) },
      },
      handler: (request, reply) => {
        checkOrigin(request, config.baseUrl);
        return serve(request, reply, operations.approvePurchase, { id: (request.params as Static<typeof IdParams>).id });
      },
    });

    app.post('/v1/payments/purchases/:id/decline', {
      config: { auth: HUMAN, operation: operations.declinePurchase },
      schema: {
        operationId: 'declinePurchase',
        tags,
        summary: "Decline a purchase above the agent's approval threshold, or withdraw an approval not used yet (the human owner only)",
        description:
          'A pending purchase, or an approved one the agent has not used yet (the approval withdrawn), becomes `declined` (event `purchase.declined`, `reason: declined`): the agent\'s retry of the request answers ' +
          '409 conflict (`reason: purchase_declined`), stored under its key, and nothing is taken; an execute\'s retained intent is ' +
          'cancelled. Declining again answers it unchanged; 409 conflict for an expired or used one (`reason` approval_expired or approval_used, with `approvalId`, `intentId` and `purchase`). Idempotency-Key honoured when sent.',
        params: IdParams,
        body: EmptyBody,
        response: { 200: Type.Ref('PurchaseApproval'), ...problems(403, 404, 409) },
      },
      handler: (request, reply) => {
        checkOrigin(request, config.baseUrl);
        return serve(request, reply, operations.declinePurchase, { id: (request.params as Static<typeof IdParams>).id });
      },
    });

    app.get('/payments/purchases/:id', {
      attachValidation: true,
      schema: {
        operationId: 'showPurchaseApprovalPage',
        tags,
        summary: 'The approval page of a purchase (HTML)',
        description: "The owner signs in here, sees the agent, the merchant, the offer and the amount, and approves or declines.",
        params: IdParams,
        response: { 200: HtmlPage('the approval page'), 400: HtmlPage('a link whose id cannot name an approval') },
      },
      handler: page('purchase'),
    });

    app.route(
      queryRoute('GET', '/v1/owner/approvals', deps.queries.listApprovals, {
        auth: OWNER,
        tags,
        summary: 'List the approvals that wait for you: top-ups and purchases (oldest first)',
        description:
          'Every top-up and purchase approval of your agents, oldest first, a page at a time; `status=pending` (the default) keeps those ' +
          'that wait for your answer now (a pending one past its deadline is expired). Each names its kind, the agent (with its name), ' +
          'the amount, for a purchase the merchant and the offer, its status, its approval page and its deadline.',
        errors: [400],
      }),
    );

    const { notifications } = payments;
    if (notifications) await app.register(notificationRoute(payments, notifications));
  };
}

/** The rail's notification endpoint, in its own scope: the signature covers the exact bytes, so the body stays raw. */
function notificationRoute(payments: PaymentsService, notifications: RailNotifications) {
  return async function routes(app: FastifyInstance): Promise<void> {
    app.removeContentTypeParser('application/json');
    app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
    app.post(notifications.path, {
      config: { notAnOperation: "a payment rail's signed notification: authenticated by its signature, applied exactly once under the top-up's row lock" },
      schema: {
        operationId: notifications.operationId,
        tags: ['payments'],
        summary: notifications.summary,
        description: notifications.description,
        response: { 200: Type.Object({ received: Type.Literal(true), outcome: Type.String() }), ...problems(400) },
      },
      handler: async (request) => payments.receiveNotification(request.body as Buffer, request.headers[notifications.signatureHeader]),
    });
  };
}
