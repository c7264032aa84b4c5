// A local stand-in for the Stripe API endpoints the gateway uses, in Stripe's wire format: form-encoded
// requests with Bearer auth, JSON objects back, Idempotency-Key honoured, Stripe's error envelope. It also
// builds and signs the webhook events Stripe would send (signed with the official library).
//   POST /v1/checkout/sessions            create a Checkout Session
//   POST /v1/checkout/sessions/{id}/expire expire an open session (400 once it is complete)
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';

export const FAKE_STRIPE_SECRET_KEY = 'sk_test_gatewaytests';
export const FAKE_STRIPE_WEBHOOK_SECRET = 'whsec_gatewaytestsecret';

export interface FakeSession {
  id: string;
  object: 'checkout.session';
  url: string;
  mode: string;
  amount_total: number;
  currency: string;
  client_reference_id: string | null;
  metadata: Record<string, string>;
  livemode: boolean;
  payment_status: 'unpaid' | 'paid';
  status: 'open' | 'complete' | 'expired';
  expires_at: number;
  success_url: string;
  cancel_url: string;
}

export interface FakeStripe {
  url: string;
  /** Every request received: path, the form parameters as sent (flat keys) and the headers. */
  requests: Array<{ path: string; params: Record<string, string>; headers: IncomingHttpHeaders }>;
  sessions: Map<string, FakeSession>;
  sessionForTopup(topupId: string): FakeSession;
  /** The owner paid at Checkout. */
  pay(sessionId: string): FakeSession;
  /** A webhook delivery: its exact body and a Stripe-Signature header for it. */
  event(type: string, session: FakeSession, secret?: string): { id: string; payload: string; signature: string };
  /** Any body, signed as Stripe signs a delivery (for events of shapes Stripe should never send). */
  signed(payload: string, secret?: string): { payload: string; signature: string };
  close(): Promise<void>;
}

const signer = new Stripe(FAKE_STRIPE_SECRET_KEY);

function send(response: ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { 'content-type': 'application/json', 'request-id': `req_${randomBytes(8).toString('hex')}` }).end(JSON.stringify(body));
}

function stripeError(response: ServerResponse, status: number, message: string, code: string): void {
  send(response, status, { error: { type: 'invalid_request_error', code, message } });
}

export async function startFakeStripe(): Promise<FakeStripe> {
  const requests: FakeStripe['requests'] = [];
  const sessions = new Map<string, FakeSession>();
  const byIdempotencyKey = new Map<string, FakeSession>();
  let base = '';

  const server: Server = createServer((request, response) => {
    let text = '';
    request.on('data', (chunk: Buffer) => (text += chunk.toString()));
    request.on('end', () => {
      const params = Object.fromEntries(new URLSearchParams(text));
      const path = (request.url ?? '').split('?')[0]!;
      requests.push({ path, params, headers: request.headers });
      if (request.headers.authorization !== `Bearer ${FAKE_STRIPE_SECRET_KEY}`) {
        send(response, 401, { error: { type: 'invalid_request_error', message: 'Invalid API Key provided' } });
        return;
      }
      if (request.method === 'POST' && path === '/v1/checkout/sessions') {
        const key = request.headers['idempotency-key'];
        const known = typeof key === 'string' ? byIdempotencyKey.get(key) : undefined;
        if (known) return send(response, 200, known);
        const id = `cs_test_${randomBytes(12).toString('hex')}`;
        const metadata: Record<string, string> = {};
        for (const [name, value] of Object.entries(params)) {
          const match = /^metadata\[(.+)\]$/.exec(name);
          if (match) metadata[match[1]!] = value;
        }
        const session: FakeSession = {
          id,
          object: 'checkout.session',
          url: `${base}/c/pay/${id}`,
          mode: params.mode ?? '',
          amount_total: Number(params['line_items[0][price_data][unit_amount]']) * Number(params['line_items[0][quantity]'] ?? 1),
          currency: params['line_items[0][price_data][currency]'] ?? '',
          client_reference_id: params.client_reference_id ?? null,
          metadata,
          livemode: false,
          payment_status: 'unpaid',
          status: 'open',
          expires_at: Number(params.expires_at),
          success_url: params.success_url ?? '',
          cancel_url: params.cancel_url ?? '',
        };
        sessions.set(id, session);
        if (typeof key === 'string') byIdempotencyKey.set(key, session);
        return send(response, 200, session);
      }
      const expire = /^\/v1\/checkout\/sessions\/([^/]+)\/expire$/.exec(path);
      if (request.method === 'POST' && expire) {
        const session = sessions.get(expire[1]!);
        if (!session) return stripeError(response, 404, `No such checkout.session: '${expire[1]}'`, 'resource_missing');
        if (session.status !== 'open') return stripeError(response, 400, `Only Checkout Sessions with a status in [open] can be expired.`, 'checkout_session_not_open');
        session.status = 'expired';
        return send(response, 200, session);
      }
      stripeError(response, 404, `Unrecognized request URL (${request.method}: ${path})`, 'resource_missing');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    url: base,
    requests,
    sessions,
    sessionForTopup(topupId) {
      const session = [...sessions.values()].find((s) => s.client_reference_id === topupId);
      if (!session) throw new Error(`no Checkout Session for top-up ${topupId}`);
      return session;
    },
    pay(sessionId) {
      const session = sessions.get(sessionId)!;
      session.payment_status = 'paid';
      session.status = 'complete';
      return session;
    },
    event(type, session, secret = FAKE_STRIPE_WEBHOOK_SECRET) {
      const id = `evt_${randomBytes(12).toString('hex')}`;
      const payload = JSON.stringify({
        id,
        object: 'event',
        api_version: '2026-10-28.endive',
        created: Math.floor(Date.now() / 1000),
        type,
        livemode: false,
        pending_webhooks: 1,
        request: { id: null, idempotency_key: null },
        data: { object: { ...session } },
      });
      return { id, payload, signature: signer.webhooks.generateTestHeaderString({ payload, secret }) };
    },
    signed(payload, secret = FAKE_STRIPE_WEBHOOK_SECRET) {
      return { payload, signature: signer.webhooks.generateTestHeaderString({ payload, secret }) };
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
