// The README's example: a merchant server that accepts a voucher (sent as a bearer token) and captures it.
import http from 'node:http';
import { MerchantClient } from '@agent-credit-gateway/merchant';

export function shopServer(gateway: MerchantClient, offerId: string): http.Server {
  return http.createServer(async (request, response) => {
    try {
      const voucher = await gateway.verifyVoucher(request.headers.authorization?.replace(/^Bearer /, '') ?? '', { offerId });
      const redemption = await gateway.capture(voucher.redemptionId);
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ paidUc: redemption.capturedUc, receipt: redemption.captureReceipt }));
    } catch (error) {
      response.writeHead(402, { 'content-type': 'text/plain' }).end(`payment refused: ${(error as Error).message}`);
    }
  });
}
