// Merchants through the real routes, plus the pieces webhook tests share: a TLS receiver that answers for a
// public-looking test name, and the outbound hooks that lead the gateway there.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { OutboundTestHooks } from '../../src/platform/outbound.ts';
import { makeTestCertificate, type TestCertificate } from './test-certificate.ts';
import { startWebhookReceiver, type WebhookReceiver } from './webhook-receiver.ts';
import type { ApiResponse, World } from './world.ts';

/** A public-looking domain no resolver knows; the outbound hooks map its names to the local receiver. */
export const HOOK_DOMAIN = 'shop-test.com';
export const HOOK_HOST = `hooks.${HOOK_DOMAIN}`;

let counter = 0;
export const uniqueKey = (label = 'k') => `${label}-${Date.now()}-${++counter}`;

export async function registerMerchant(
  world: World,
  token: string,
  body: { name?: string; domain?: string; categories?: string[] } = {},
): Promise<{ merchant: Record<string, any>; dnsRecord: { type: string; name: string; value: string } }> {
  const res = await world.api('POST', '/v1/merchants', {
    token,
    key: uniqueKey('register'),
    body: { name: body.name ?? 'Test shop', domain: body.domain ?? HOOK_DOMAIN, categories: body.categories ?? ['books'] },
  });
  if (res.status !== 201) throw new Error(`registration failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** For tests that are not about DNS: marks the merchant verified the way a found TXT record would. */
export async function markVerified(world: World, merchantId: string): Promise<void> {
  await world.gw.gateway.db.query('UPDATE merchants SET verified = true, verified_at_s = $2 WHERE id = $1', [merchantId, world.gw.clock.nowS()]);
}

export async function configureWebhook(world: World, token: string, merchantId: string, url = `https://${HOOK_HOST}/acg/events`): Promise<ApiResponse> {
  return world.api('PUT', `/v1/merchants/${merchantId}/webhook`, { token, key: uniqueKey('webhook'), body: { url } });
}

export interface HookTarget {
  receiver: WebhookReceiver;
  cert: TestCertificate;
  /** ACG_OUTBOUND_CA_FILE for the gateway: the receiver's certificate. */
  caFile: string;
  /** Resolves *.shop-test.com to 127.0.0.1 and connects to the receiver's port. */
  outbound: OutboundTestHooks;
  close(): Promise<void>;
}

/** An HTTPS receiver with a certificate for hooks.shop-test.com, judging timestamps by `nowS`. */
export async function startHookTarget(options: { nowS?: () => number; resolvesTo?: string[] } = {}): Promise<HookTarget> {
  const cert = makeTestCertificate({ dns: [HOOK_HOST, `*.${HOOK_DOMAIN}`] });
  const receiver = await startWebhookReceiver({ tls: cert, nowS: options.nowS });
  const dir = mkdtempSync(path.join(tmpdir(), 'acg-hook-ca-'));
  const caFile = path.join(dir, 'ca.pem');
  writeFileSync(caFile, cert.certPem);
  const outbound: OutboundTestHooks = {
    lookupHost: async (hostname) => {
      if (hostname === HOOK_DOMAIN || hostname.endsWith(`.${HOOK_DOMAIN}`)) return options.resolvesTo ?? ['127.0.0.1'];
      throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    },
    connectPort: () => receiver.port,
  };
  return {
    receiver,
    cert,
    caFile,
    outbound,
    async close() {
      await receiver.close();
      cert.remove();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Writes a PEM to a temporary file (configuration takes CA files, the DoH test server gives PEM). */
export function pemFile(pem: string): { file: string; remove(): void } {
  const dir = mkdtempSync(path.join(tmpdir(), 'acg-pem-'));
  const file = path.join(dir, 'ca.pem');
  writeFileSync(file, pem);
  return { file, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
