// A merchant's webhook endpoint for tests: records every request and checks its Standard Webhooks
// signature with the reference library, the way a real merchant would.
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface ReceivedWebhook {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** True when `Webhook.verify` accepted the signature, timestamp and body. */
  verified: boolean;
  verifyError?: string;
}

export interface WebhookReceiver {
  /** Base URL, e.g. http://127.0.0.1:40123 (https when a certificate was given). */
  url: string;
  port: number;
  received: ReceivedWebhook[];
  /** Status code for the following requests (default 200). */
  answerWith(status: number): void;
  close(): Promise<void>;
}

function headerRecord(headers: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) if (typeof value === 'string') out[name] = value;
  return out;
}

export async function startWebhookReceiver(options: { secret: string; tls?: { certPem: string; keyPem: string } }): Promise<WebhookReceiver> {
  const verifier = new Webhook(options.secret);
  const received: ReceivedWebhook[] = [];
  let status = 200;
  const handler: http.RequestListener = (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let verified = false;
      let verifyError: string | undefined;
      try {
        verifier.verify(body, headerRecord(req.headers));
        verified = true;
      } catch (error) {
        verifyError = (error as Error).message;
      }
      received.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body, verified, verifyError });
      res.writeHead(status, { 'content-type': 'text/plain' }).end('thanks');
    });
  };
  const server = options.tls ? https.createServer({ cert: options.tls.certPem, key: options.tls.keyPem }, handler) : http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `${options.tls ? 'https' : 'http'}://127.0.0.1:${port}`,
    port,
    received,
    answerWith: (next) => { status = next; },
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}
