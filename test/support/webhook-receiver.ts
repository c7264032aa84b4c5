// A merchant's webhook endpoint for tests: records every request and checks its Standard Webhooks
// signature with the reference library, the way a real merchant would.
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';

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
  /** Status code for the following requests (default 200), and headers beside content-type (default none). */
  answerWith(status: number, headers?: Record<string, string>): void;
  /** true: the following requests are recorded but never answered (a receiver that hangs); false: answer again. */
  hang(on: boolean): void;
  /** The secret to verify the following requests with (e.g. once a webhook PUT has returned it). */
  useSecret(secret: string): void;
  /** Drops every connection, the hanging requests' too (their senders see a reset at once); goes on listening. */
  disconnect(): void;
  close(): Promise<void>;
}

function headerRecord(headers: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) if (typeof value === 'string') out[name] = value;
  return out;
}

/** The library judges webhook-timestamp against Date.now(); this one judges it against the given clock. */
function verifierFor(secret: string, nowS?: () => number): Webhook {
  const verifier = new Webhook(secret);
  if (!nowS) return verifier;
  // A merchant whose clock agrees with the gateway's: tests move the gateway clock forward to drive retries.
  return Object.assign(verifier, {
    verifyTimestamp(header: string): Date {
      const timestampS = Number.parseInt(header, 10);
      if (Number.isNaN(timestampS) || Math.abs(nowS() - timestampS) > 5 * 60) throw new WebhookVerificationError('timestamp outside tolerance');
      return new Date(timestampS * 1000);
    },
  });
}

export async function startWebhookReceiver(options: {
  /** Optional at start: a receiver may learn its secret later (useSecret). */
  secret?: string;
  tls?: { certPem: string; keyPem: string };
  /** The receiver's clock in Unix seconds (default: the system clock, as the library does). */
  nowS?: () => number;
  /** Where to listen (default 127.0.0.1, a free port). */
  listen?: { host: string; port: number };
}): Promise<WebhookReceiver> {
  let verifier = options.secret ? verifierFor(options.secret, options.nowS) : undefined;
  const received: ReceivedWebhook[] = [];
  let status = 200;
  let extraHeaders: Record<string, string> = {};
  let hanging = false;
  const handler: http.RequestListener = (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let verified = false;
      let verifyError: string | undefined;
      try {
        if (!verifier) throw new Error('the receiver has no secret yet');
        verifier.verify(body, headerRecord(req.headers));
        verified = true;
      } catch (error) {
        verifyError = (error as Error).message;
      }
      received.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body, verified, verifyError });
      if (hanging) return;
      res.writeHead(status, { ...extraHeaders, 'content-type': 'text/plain' }).end('thanks');
    });
  };
  const server = options.tls ? https.createServer({ cert: options.tls.certPem, key: options.tls.keyPem }, handler) : http.createServer(handler);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.listen?.port ?? 0, options.listen?.host ?? '127.0.0.1', resolve);
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `${options.tls ? 'https' : 'http'}://${options.listen?.host ?? '127.0.0.1'}:${port}`,
    port,
    received,
    answerWith: (next, headers = {}) => { status = next; extraHeaders = headers; },
    hang: (on) => { hanging = on; },
    useSecret: (secret) => { verifier = verifierFor(secret, options.nowS); },
    disconnect: () => server.closeAllConnections(),
    close: () => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

/**
 * A TLS receiver on port 443 of a loopback address of its own (a spawned gateway connects to a webhook URL's own
 * port, 443, and its preloaded resolver maps the URL's host to that address); another address is tried when one
 * is taken.
 */
export async function startWebhookReceiverOn443(tls: { certPem: string; keyPem: string }): Promise<WebhookReceiver> {
  for (let tries = 0; ; tries++) {
    const host = `127.0.${1 + Math.floor(Math.random() * 250)}.${2 + Math.floor(Math.random() * 250)}`;
    try {
      return await startWebhookReceiver({ tls, listen: { host, port: 443 } });
    } catch (error) {
      if (tries > 5) throw error;
    }
  }
}
