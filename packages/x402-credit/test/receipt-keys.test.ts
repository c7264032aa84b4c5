// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
//
// What verifyCreditReceipt says when no key of the gateway's key set verifies a receipt, against a small local JWKS
// whose keys the test changes. It said jose's "no applicable key found in the JSON Web Key Set", naming neither the
// kid nor the key set, though a gateway clock behind this one's by more than the 30 s allowed refuses a genuine
// receipt so (found from outside: a gateway 40 s behind, a rotation with no lead, 9 s of refusals). Now it names the
// kid, the key set's URL, when that key set was fetched, the receipt's iat, and the causes that fit them.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK } from 'jose';
import { afterEach, describe, expect, it } from 'vitest';
import { CreditError, verifyCreditReceipt } from '@agent-credit-gateway/x402-credit';

const ISO = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z';
const nowS = () => Math.floor(Date.now() / 1000);

/** A local gateway's key set: each test starts its own, so each has a key-set cache of its own in the package. */
interface Gateway {
  url: string;
  addKey(kid: string): Promise<void>;
  receipt(kid: string, iatS: number): Promise<string>;
  close(): Promise<void>;
}

let gateway: Gateway | undefined;
afterEach(async () => {
  await gateway?.close();
  gateway = undefined;
});

async function startGateway(): Promise<Gateway> {
  const published: JWK[] = [];
  const signers = new Map<string, CryptoKey>();
  const server = http.createServer((request, response) => {
    if (request.url === '/.well-known/jwks.json') return void response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: published }));
    response.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    async addKey(kid) {
      const keys = await generateKeyPair('ES256');
      signers.set(kid, keys.privateKey);
      published.push({ ...(await exportJWK(keys.publicKey)), kid, alg: 'ES256', use: 'sig' });
    },
    receipt(kid, iatS) {
      return new SignJWT({
        kind: 'capture',
        redemption_id: 'hold_keys',
        offer_id: 'off_keys',
        agent_id: 'agt_keys',
        merchant_id: 'mer_keys',
        amount_uc: '2500000',
        captured_uc: '2500000',
        released_uc: '0',
        refunded_uc: '0',
        iat: iatS,
      })
        .setProtectedHeader({ alg: 'ES256', typ: 'receipt+jwt', kid })
        .setIssuer(url)
        .setJti(`rct_${kid}_${iatS}`)
        .sign(signers.get(kid)!);
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** The receipt with its header's kid replaced: a forgery. */
function forgedKid(receipt: string, kid: string): string {
  return receipt.replace(/^[^.]+/, Buffer.from(JSON.stringify({ alg: 'ES256', typ: 'receipt+jwt', kid })).toString('base64url'));
}

async function refusal(promise: Promise<unknown>): Promise<CreditError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof CreditError) return error;
    throw error;
  }
  throw new Error('expected a CreditError');
}

describe('a receipt no key of the key set verifies', () => {
  it("names the kid, the key set's URL, when it was fetched and the receipt's iat, and a gateway clock behind by more than 30 s as a cause", async () => {
    gateway = await startGateway();
    const { url } = gateway;
    await gateway.addKey('clock-old');
    await verifyCreditReceipt(await gateway.receipt('clock-old', nowS()), { gatewayUrl: url });
    // A forged kid makes this process fetch the key set for an unknown kid (the first such receipt always does).
    expect((await refusal(verifyCreditReceipt(forgedKid(await gateway.receipt('clock-old', nowS()), 'clock-forged'), { gatewayUrl: url }))).code).toBe('invalid_receipt');
    // A rotation with no lead on a gateway whose clock is 60 s behind this one's: its new key's receipts say an iat 60 s
    // ago, more than the 30 s allowed before that fetch, so the key set is not fetched again for them.
    await gateway.addKey('clock-new');
    const iatS = nowS() - 60;
    const refused = await refusal(verifyCreditReceipt(await gateway.receipt('clock-new', iatS), { gatewayUrl: url }));
    expect(refused.code).toBe('invalid_receipt');
    expect(refused.message).toMatch(
      new RegExp(
        `^invalid_receipt: the receipt does not verify: no key of the gateway's JWKS \\(${url}/\\.well-known/jwks\\.json, fetched at ${ISO}\\) has its kid "clock-new"; ` +
          `that key set was fetched before the receipt arrived, 6\\d s after its iat \\(${new Date(iatS * 1000).toISOString().replace(/\./g, '\\.')}\\), more than the clock skew allowed \\(30 s\\), ` +
          `so it was not fetched again: a forgery, a key the gateway stopped publishing \\(.*\\), or a gateway clock more than 30 s behind this one's, .*\\(check the gateway's clock\\)$`,
      ),
    );
  });

  it('says a key set fetched after the receipt arrived rules the clock out: a forgery, a key no longer published, or an instance that had not loaded a new key yet', async () => {
    gateway = await startGateway();
    const { url } = gateway;
    await gateway.addKey('after-real');
    await verifyCreditReceipt(await gateway.receipt('after-real', nowS()), { gatewayUrl: url });
    const iatS = nowS();
    const refused = await refusal(verifyCreditReceipt(forgedKid(await gateway.receipt('after-real', iatS), 'after-forged'), { gatewayUrl: url }));
    expect(refused.code).toBe('invalid_receipt');
    expect(refused.message).toContain(`no key of the gateway's JWKS (${url}/.well-known/jwks.json, fetched at `);
    expect(refused.message).toContain(`has its kid "after-forged", and that key set was fetched after the receipt arrived (its iat is ${new Date(iatS * 1000).toISOString()}): a forgery, a key the gateway stopped publishing`);
    expect(refused.message).toContain('a gateway instance that had not loaded the new key yet (for up to 5 s)');
    expect(refused.message).not.toContain('clock');
  });
});
