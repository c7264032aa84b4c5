// The README's example: a merchant server that accepts a voucher (sent as a bearer token) and captures it,
// and, given the webhook secret, takes the gateway's events at POST /acg/events, so a `voucher.revoked`
// event makes it refuse the revoked vouchers offline from then on.
import http from 'node:http';
import { GatewayError, MerchantClient, VerificationError } from '@agent-credit-gateway/merchant';

export function shopHandler(gateway: MerchantClient, offerId: string, webhookSecret?: string): http.RequestListener {
  return async (request, response) => {
    if (webhookSecret !== undefined && request.method === 'POST' && request.url === '/acg/events') {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      try {
        gateway.handleWebhook(webhookSecret, request.headers, Buffer.concat(chunks));
        response.writeHead(204).end();
      } catch (error) {
        response.writeHead(400, { 'content-type': 'text/plain' }).end((error as Error).message);
      }
      return;
    }
    try {
      const voucher = await gateway.verifyVoucher(request.headers.authorization?.replace(/^Bearer /, '') ?? '', { offerId });
      const redemption = await gateway.capture(voucher.redemptionId);
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ paidUc: redemption.capturedUc, receipt: redemption.captureReceipt }));
    } catch (error) {
      // Who refused: this server, offline (`voucher_refused`), or the gateway at capture (`capture_refused`).
      const refused = error instanceof VerificationError ? 'voucher_refused' : error instanceof GatewayError ? 'capture_refused' : 'error';
      const code = error instanceof VerificationError || error instanceof GatewayError ? error.code : undefined;
      response.writeHead(402, { 'content-type': 'application/json' }).end(JSON.stringify({ refused, code, detail: (error as Error).message }));
    }
  };
}

export function shopServer(gateway: MerchantClient, offerId: string, webhookSecret?: string): http.Server {
  return http.createServer(shopHandler(gateway, offerId, webhookSecret));
}
