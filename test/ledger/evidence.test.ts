// A redemption's evidence: one evidence+jwt JWS that a third party verifies with jose against the served
// JWKS, whose mandate is the one the voucher and every receipt name (its hash is the SHA-256 of the canonical
// JSON it carries), whose history comes from the journal, and that fails once any part of it changes. Read by
// the hold's owner and by the holding merchant's key with `evidence:read`; nobody else sees that it exists.
import { createHash } from 'node:crypto';
import { createRemoteJWKSet, decodeJwt, jwtVerify, type JWTPayload } from 'jose';
import { Value } from '@sinclair/typebox/value';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EvidenceService } from '../../src/ledger/evidence.ts';
import { EvidenceClaimsSchema, LEDGER_SCHEMAS } from '../../src/ledger/schemas.ts';
import type { Database } from '../../src/platform/db/database.ts';
import { onPostgres } from '../support/database.ts';
import { ECHO_PRICE_UC, echoConnector } from '../support/echo-connector.ts';
import { grant, mint, openShop, type Shop } from '../support/ledger-fixture.ts';
import { seedMerchantKey } from '../support/merchant-key.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let shop: Shop;
/** Keys of the shop's merchant, made through the API: one with `evidence:read`, one without. */
let evidenceKey: string;
let keyWithoutScope: string;
let counter = 0;
const SHOP_OWNER = 'evidence-shop@example.com';

async function merchantKey(scopes: string[]): Promise<string> {
  const created = await world.api('POST', `/v1/merchants/${shop.merchantId}/api-keys`, {
    token: await world.humanToken(SHOP_OWNER),
    key: `evidence-key-${++counter}`,
    body: { name: `evidence ${counter}`, scopes },
  });
  expect(created.status).toBe(201);
  return created.body.secretKey as string;
}

beforeAll(async () => {
  world = await startWorld({ dependencies: { services: [echoConnector().module] } });
  shop = await openShop(world, SHOP_OWNER);
  evidenceKey = await merchantKey(['evidence:read']);
  keyWithoutScope = await merchantKey(['offers:read', 'redemptions:capture', 'redemptions:release', 'redemptions:refund']);
});

afterAll(async () => {
  await world?.close();
});

async function fundedAgent() {
  const email = `evidence${++counter}@example.com`;
  const agent = await world.createAgent(email, `evidence-agent-${counter}`, { allowedCategories: ['books', 'testing'] });
  await grant(world, agent.id, 100_000_000n);
  return { ...agent, email };
}

const evidenceOf = (holdId: string, token: string) => world.api('GET', `/v1/redemptions/${holdId}/evidence`, { token });

/** Verifies a JWS of the gateway as any third party would: jose, the served JWKS, the issuer, the `typ`. */
async function verify(jws: string, typ: string): Promise<JWTPayload> {
  const jwks = createRemoteJWKSet(new URL(`${world.url}/.well-known/jwks.json`));
  const { payload, protectedHeader } = await jwtVerify(jws, jwks, { issuer: world.gw.config.baseUrl, algorithms: ['ES256'], typ });
  expect(protectedHeader).toMatchObject({ alg: 'ES256', typ, kid: expect.any(String) });
  return payload;
}

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('base64url');

const segment = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
const decoded = (part: string) => JSON.parse(Buffer.from(part, 'base64url').toString()) as Record<string, any>;

/** A captured (in part) and twice refunded purchase of a merchant offer: its voucher and its evidence. */
async function disputedPurchase() {
  const agent = await fundedAgent();
  const offer = await shop.offer({ priceUc: '2500000' });
  const minted = await mint(world, agent.token, offer.id);
  expect(minted.status).toBe(200);
  const holdId = minted.body.redemption.id as string;
  const capture = await world.api('POST', `/v1/redemptions/${holdId}/capture`, { token: shop.key, key: `evidence-cap-${++counter}`, body: { amountUc: '1500000' } });
  expect(capture.status).toBe(200);
  for (const amountUc of ['400000', '100000']) {
    const refund = await world.api('POST', `/v1/redemptions/${holdId}/refunds`, { token: shop.key, key: `evidence-refund-${++counter}`, body: { amountUc, reason: 'late' } });
    expect(refund.status).toBe(201);
  }
  const res = await evidenceOf(holdId, agent.ownerToken);
  expect(res.status).toBe(200);
  return { agent, offer, holdId, voucher: minted.body.voucher as string, evidence: res.body.evidence as string };
}

describe('the evidence of a redemption', () => {
  it('verifies with jose against the JWKS and names the mandate the voucher and every receipt name, the hash of the canonical JSON it carries', async () => {
    const { agent, offer, holdId, voucher, evidence } = await disputedPurchase();
    const claims = await verify(evidence, 'evidence+jwt');
    expect(Value.Check(EvidenceClaimsSchema, LEDGER_SCHEMAS, claims), JSON.stringify([...Value.Errors(EvidenceClaimsSchema, LEDGER_SCHEMAS, claims)])).toBe(true);
    expect(claims).toMatchObject({ iss: world.gw.config.baseUrl, sub: holdId, jti: expect.stringMatching(/^evd_/), iat: expect.any(Number) });

    const mandate = claims.mandate as { version: number; hash: string; canonical: string };
    expect(mandate.version).toBe(1);
    expect(sha256(mandate.canonical)).toBe(mandate.hash);
    expect(JSON.parse(mandate.canonical)).toMatchObject({ agentId: agent.id, version: 1, allowedCategories: ['books', 'testing'] });
    expect(claims.voucher).toBe(voucher);
    expect(decodeJwt(voucher).mandate).toBe(mandate.hash);
    expect((await world.api('GET', `/v1/owner/agents/${agent.id}/mandate/versions/1`, { token: agent.ownerToken })).body).toMatchObject({ hash: mandate.hash, canonical: mandate.canonical });

    expect(claims.offer).toMatchObject({ id: offer.id, merchantId: shop.merchantId, priceUc: '2500000', category: 'books' });
    const receipts = claims.receipts as string[];
    expect(receipts).toHaveLength(3);
    const verified = await Promise.all(receipts.map((receipt) => verify(receipt, 'receipt+jwt')));
    expect(verified.map((receipt) => [receipt.kind, receipt.refund_uc, receipt.redemption_id, receipt.mandate])).toEqual([
      ['capture', undefined, holdId, mandate.hash],
      ['refund', '400000', holdId, mandate.hash],
      ['refund', '100000', holdId, mandate.hash],
    ]);

    const redemption = (await world.api('GET', `/v1/redemptions/${holdId}`, { token: shop.key })).body;
    expect(claims.redemption).toEqual(redemption);
    expect(claims.history).toEqual([
      { event: 'held', at: redemption.createdAt, amountUc: '2500000', operationId: holdId },
      { event: 'captured', at: redemption.capturedAt, amountUc: '1500000', releasedUc: '1000000', operationId: `${holdId}:capture` },
      { event: 'refunded', at: redemption.refunds[0].createdAt, amountUc: '400000', operationId: redemption.refunds[0].id },
      { event: 'refunded', at: redemption.refunds[1].createdAt, amountUc: '100000', operationId: redemption.refunds[1].id },
    ]);
  });

  it('fails verification once any part changes: a claim, the mandate inside a re-encoded payload, the header, the signature', async () => {
    const { evidence } = await disputedPurchase();
    const [header, payload, signature] = evidence.split('.') as [string, string, string];
    const claims = decoded(payload);
    const tampered: Array<[string, string]> = [];
    for (const claim of Object.keys(claims)) {
      const value = claims[claim];
      const changed = { ...claims, [claim]: typeof value === 'number' ? value + 1 : typeof value === 'string' ? `${value}x` : value === null ? {} : null };
      tampered.push([`claim ${claim}`, [header, segment(changed), signature].join('.')]);
    }
    // A purchase made under a looser rule: the canonical JSON rewritten, its hash made to match, the rest kept.
    const looser = claims.mandate.canonical.replace('"allowedCategories":["books","testing"]', '"allowedCategories":["*"]');
    expect(looser).not.toBe(claims.mandate.canonical);
    tampered.push(['mandate canonical', [header, segment({ ...claims, mandate: { ...claims.mandate, canonical: looser } }), signature].join('.')]);
    tampered.push(['mandate canonical and hash', [header, segment({ ...claims, mandate: { ...claims.mandate, canonical: looser, hash: sha256(looser) } }), signature].join('.')]);
    tampered.push(['history', [header, segment({ ...claims, history: claims.history.slice(0, 1) }), signature].join('.')]);
    tampered.push(['header kid', [segment({ ...decoded(header), kid: 'another' }), payload, signature].join('.')]);
    tampered.push(['header typ', [segment({ ...decoded(header), typ: 'receipt+jwt' }), payload, signature].join('.')]);
    tampered.push(['header re-encoded with another member', [segment({ ...decoded(header), x: 1 }), payload, signature].join('.')]);
    const bytes = Buffer.from(signature, 'base64url');
    bytes[0] = bytes[0]! ^ 0x01;
    tampered.push(['signature', [header, payload, bytes.toString('base64url')].join('.')]);
    tampered.push(['signature of another JWS', [header, payload, (await disputedPurchase()).evidence.split('.')[2]].join('.')]);
    for (const [what, jws] of tampered) await expect(verify(jws, 'evidence+jwt'), what).rejects.toThrow();
    await expect(verify(evidence, 'evidence+jwt')).resolves.toBeDefined();
  });

  it('is read by the owner (session or OAuth token) and the holding merchant key with evidence:read; another owner and another merchant find nothing, a key without the scope is refused', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer();
    const holdId = (await mint(world, agent.token, offer.id)).body.redemption.id as string;
    const ownerId = (await world.api('GET', '/v1/me', { token: agent.ownerToken })).body.owner.id as string;
    const ownerOAuth = await world.accessToken({ sub: ownerId, scope: 'svc:owner', email: agent.email });
    for (const token of [agent.ownerToken, ownerOAuth, evidenceKey]) {
      const res = await evidenceOf(holdId, token);
      expect(res.status).toBe(200);
      expect((await verify(res.body.evidence, 'evidence+jwt')).sub).toBe(holdId);
    }

    const stranger = await fundedAgent();
    const otherMerchant = await seedMerchantKey(world, { ownerEmail: 'evidence-other-shop@example.com', scopes: ['evidence:read', 'offers:read'] });
    const refusals = [
      ['another owner', stranger.ownerToken, 404, 'not_found'],
      ["another merchant's key", otherMerchant.key, 404, 'not_found'],
      ["the shop owner's own session (not the agent's owner)", await world.humanToken(SHOP_OWNER), 404, 'not_found'],
      ['a key without evidence:read', keyWithoutScope, 403, 'scope_required'],
      ['the agent itself', agent.token, 403, 'owner_required'],
    ] as const;
    for (const [who, token, status, code] of refusals) {
      const res = await evidenceOf(holdId, token);
      expect([res.status, res.body.code], who).toEqual([status, code]);
    }
    // The agent is told who reads evidence (found from outside: "a merchant's owner", whom the route answers 404).
    expect((await evidenceOf(holdId, agent.token)).body.detail).toBe("this route is for the owner of the hold's agent or the holding merchant's API key (scope evidence:read), not an agent");
    // What another owner and another merchant see is what a missing id gets: nothing shows through.
    for (const token of [stranger.ownerToken, otherMerchant.key]) {
      const [known, missing] = [await evidenceOf(holdId, token), await evidenceOf('hold_doesnotexist', token)];
      expect({ ...known.body, detail: undefined, instance: undefined }).toEqual({ ...missing.body, detail: undefined, instance: undefined });
      expect(known.body.detail).not.toContain(agent.id);
    }
  });

  it("of an execution holds the built-in service and action as sold and no voucher; no merchant key reads it", async () => {
    const agent = await fundedAgent();
    const executed = await world.api('POST', '/v1/services/execute', { token: agent.token, key: `evidence-exec-${++counter}`, body: { serviceId: 'echo', action: 'say', input: { message: 'hello' } } });
    expect(executed.status).toBe(200);
    const holdId = executed.body.receipt.id as string;
    const res = await evidenceOf(holdId, agent.ownerToken);
    expect(res.status).toBe(200);
    const claims = await verify(res.body.evidence, 'evidence+jwt');
    expect(claims.offer).toEqual({ serviceId: 'echo', action: 'say', title: 'Echo (tests only)', priceUc: ECHO_PRICE_UC.toString() });
    expect(claims.voucher).toBeNull();
    expect(claims.redemption).toMatchObject({ id: holdId, acceptorId: 'gateway', offerId: 'echo:say', state: 'captured' });
    const mandate = claims.mandate as { hash: string; canonical: string };
    expect(sha256(mandate.canonical)).toBe(mandate.hash);
    const [receipt] = await Promise.all((claims.receipts as string[]).map((jws) => verify(jws, 'receipt+jwt')));
    expect(receipt).toMatchObject({ kind: 'capture', merchant_id: 'gateway', redemption_id: holdId, mandate: mandate.hash });
    expect((claims.history as Array<{ event: string }>).map((entry) => entry.event)).toEqual(['held', 'captured']);
    expect((await evidenceOf(holdId, evidenceKey)).status).toBe(404);
  });

  it("of a purchase above the approval threshold carries the owner's approval, signed; one at or below it carries none (found from outside: an approved purchase read as a broken rule)", async () => {
    const agent = await fundedAgent();
    const put = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, {
      token: agent.ownerToken,
      key: `evidence-threshold-${counter}`,
      body: { allowedCategories: ['books', 'testing'], approvalAboveUc: '1500000' },
    });
    expect(put.status).toBe(200);
    const above = await shop.offer({ priceUc: '2000000' });
    const key = `evidence-approved-${counter}`;
    const asked = await mint(world, agent.token, above.id, key);
    expect(asked.status).toBe(402);
    const approvalId = new URL(asked.body.approvalUrl as string).pathname.split('/').pop()!;
    const approved = await world.api('POST', `/v1/payments/purchases/${approvalId}/approve`, { token: agent.ownerToken, body: {} });
    expect(approved.status).toBe(200);
    const minted = await mint(world, agent.token, above.id, key);
    expect(minted.status).toBe(200);
    const holdId = minted.body.redemption.id as string;

    const claims = await verify((await evidenceOf(holdId, evidenceKey)).body.evidence, 'evidence+jwt');
    expect(Value.Check(EvidenceClaimsSchema, LEDGER_SCHEMAS, claims), JSON.stringify([...Value.Errors(EvidenceClaimsSchema, LEDGER_SCHEMAS, claims)])).toBe(true);
    const read = (await world.api('GET', `/v1/payments/purchases/${approvalId}`, { token: agent.ownerToken })).body;
    expect(claims.approval).toEqual({ id: approvalId, requestedAt: read.createdAt, approvedAt: read.decidedAt, approvedBy: expect.stringMatching(/\S/), amountUc: '2000000', offerId: above.id });
    expect(JSON.parse((claims.mandate as { canonical: string }).canonical).approvalAboveUc).toBe('1500000');

    const below = await mint(world, agent.token, (await shop.offer({ priceUc: '1500000' })).id);
    expect(below.status).toBe(200);
    const plain = await verify((await evidenceOf(below.body.redemption.id as string, evidenceKey)).body.evidence, 'evidence+jwt');
    expect(plain.approval).toBeNull();
  });

  it('keeps the mandate version in force at the hold after the owner changes the mandate', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer();
    const minted = await mint(world, agent.token, offer.id);
    const changed = await world.api('PUT', `/v1/owner/agents/${agent.id}/mandate`, {
      token: agent.ownerToken,
      key: `evidence-mandate-${++counter}`,
      body: { allowedCategories: ['music'], budgets: [{ id: 'daily', limitUc: '1000', period: 'day' }] },
    });
    expect(changed.status).toBe(200);
    expect(changed.body.version).toBe(2);
    const claims = await verify((await evidenceOf(minted.body.redemption.id, evidenceKey)).body.evidence, 'evidence+jwt');
    const mandate = claims.mandate as { version: number; hash: string; canonical: string };
    expect(mandate.version).toBe(1);
    expect(mandate.hash).toBe(decodeJwt(minted.body.voucher).mandate);
    expect(mandate.hash).not.toBe(changed.body.hash);
    expect(sha256(mandate.canonical)).toBe(mandate.hash);
    expect(JSON.parse(mandate.canonical)).toMatchObject({ version: 1, allowedCategories: ['books', 'testing'], budgets: [] });
  });

  it("of a delegate's purchase carries every ancestor's mandate version in force at the hold, root first (each bound it too); a root's has none (found from outside)", async () => {
    const root = await fundedAgent();
    const rootMandate = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, {
      token: root.ownerToken,
      key: `evidence-root-${++counter}`,
      body: { allowedCategories: ['books'], budgets: [{ id: 'daily', limitUc: '50000000', period: 'day' }], delegation: { allowed: true, maxDepth: 2 } },
    });
    expect(rootMandate.status, JSON.stringify(rootMandate.body)).toBe(200);
    const created = async (parentId: string, token: string, maxDepth: number) => {
      const subject = `evidence-delegate-${++counter}`;
      const res = await world.api('POST', `/v1/agents/${parentId}/delegates`, {
        token,
        key: `evidence-delegate-${counter}`,
        body: { name: subject, identity: { issuer: world.agentIssuer.issuer, subject }, mandate: { budgets: [{ id: 'daily', limitUc: '20000000', period: 'day' }], delegation: { allowed: maxDepth > 0, maxDepth } } },
      });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      return { id: res.body.id as string, token: await world.agentToken(subject, root.email) };
    };
    const child = await created(root.id, root.token, 1);
    const grandchild = await created(child.id, child.token, 0);
    const offer = await shop.offer();
    const minted = await mint(world, grandchild.token, offer.id);
    expect(minted.status, JSON.stringify(minted.body)).toBe(200);
    // A later change of an ancestor's mandate does not change what the hold was taken under.
    const later = await world.api('PUT', `/v1/owner/agents/${root.id}/mandate`, {
      token: root.ownerToken,
      key: `evidence-root-${++counter}`,
      body: { allowedCategories: ['books'], budgets: [{ id: 'daily', limitUc: '40000000', period: 'day' }], delegation: { allowed: true, maxDepth: 2 } },
    });
    expect(later.status).toBe(200);

    const claims = await verify((await evidenceOf(minted.body.redemption.id, evidenceKey)).body.evidence, 'evidence+jwt');
    expect(Value.Check(EvidenceClaimsSchema, LEDGER_SCHEMAS, claims)).toBe(true);
    const ancestors = claims.ancestorMandates as Array<{ agentId: string; version: number; hash: string; canonical: string }>;
    expect(ancestors.map(({ agentId, version }) => [agentId, version])).toEqual([[root.id, rootMandate.body.version], [child.id, 1]]);
    for (const ancestor of ancestors) {
      expect(sha256(ancestor.canonical)).toBe(ancestor.hash);
      expect(JSON.parse(ancestor.canonical)).toMatchObject({ agentId: ancestor.agentId, version: ancestor.version });
    }
    expect(ancestors[0]!.hash).toBe(rootMandate.body.hash);
    expect(JSON.parse(ancestors[0]!.canonical).budgets).toEqual([expect.objectContaining({ id: 'daily', limitUc: '50000000' })]);
    expect((claims.mandate as { canonical: string }).canonical).toContain(grandchild.id);

    const own = await mint(world, root.token, offer.id);
    expect((await verify((await evidenceOf(own.body.redemption.id, evidenceKey)).body.evidence, 'evidence+jwt')).ancestorMandates).toEqual([]);
  });

  it('shows a release, and an expiry reclaimed on read, in its history', async () => {
    const agent = await fundedAgent();
    const released = (await mint(world, agent.token, (await shop.offer({ priceUc: '700000' })).id)).body.redemption.id as string;
    expect((await world.api('POST', `/v1/redemptions/${released}/release`, { token: shop.key, key: `evidence-release-${++counter}`, body: {} })).status).toBe(200);
    const releasedClaims = await verify((await evidenceOf(released, evidenceKey)).body.evidence, 'evidence+jwt');
    expect(releasedClaims.history).toEqual([
      { event: 'held', at: expect.any(Number), amountUc: '700000', operationId: released },
      { event: 'released', at: expect.any(Number), amountUc: '700000', operationId: `${released}:release` },
    ]);
    expect(releasedClaims.receipts).toEqual([]);

    const lapsing = (await mint(world, agent.token, (await shop.offer({ priceUc: '300000', holdLifetimeS: 60 })).id)).body.redemption.id as string;
    world.gw.clock.advance(61_000);
    const expiredClaims = await verify((await evidenceOf(lapsing, agent.ownerToken)).body.evidence, 'evidence+jwt');
    expect(expiredClaims.redemption).toMatchObject({ state: 'expired', releasedUc: '300000' });
    expect((expiredClaims.history as Array<{ event: string; amountUc: string }>).map(({ event, amountUc }) => [event, amountUc])).toEqual([
      ['held', '300000'],
      ['expired', '300000'],
    ]);
  });
});

// A capture that commits while the evidence is being read: only PostgreSQL runs the two at once (PGlite has one
// connection, so there the capture would wait for the read).
describe.skipIf(!onPostgres())('one snapshot', () => {
  it('agrees with itself when its hold is captured while it is read: the redemption, the receipts and the history tell one story', async () => {
    const agent = await fundedAgent();
    const offer = await shop.offer({ priceUc: '100000' });
    const holdId = (await mint(world, agent.token, offer.id)).body.redemption.id as string;
    const { gateway, services } = world.gw;
    let captured: Promise<{ status: number }> | undefined;
    // The read's transaction, with the capture committed (on another connection) in the middle of reading the
    // redemption: after its allocations are read and before its refunds and journal are.
    const db: Database = {
      ...gateway.db,
      transaction: (fn) =>
        gateway.db.transaction((tx) =>
          fn({
            ...tx,
            query: async (sql, params) => {
              const result = await tx.query(sql, params);
              if (!captured && /FROM hold_allocations/.test(sql)) {
                captured = world.api('POST', `/v1/redemptions/${holdId}/capture`, { token: shop.key, key: `evidence-race-${++counter}`, body: {} });
                expect((await captured).status).toBe(200);
              }
              return result as never;
            },
          }),
        ),
    };
    const evidence = new EvidenceService({ ...gateway, db }, services.ledger, services.identity, services.payments.purchases);
    const claims = await verify((await evidence.evidence(holdId)).evidence, 'evidence+jwt');
    expect(captured).toBeDefined();
    expect((claims.redemption as { state: string }).state).toBe('held');
    expect((claims.history as Array<{ event: string }>).map((entry) => entry.event)).toEqual(['held']);
    expect(claims.receipts).toEqual([]);
    // Read again, it shows the capture throughout.
    const after = await verify((await evidenceOf(holdId, evidenceKey)).body.evidence, 'evidence+jwt');
    expect([(after.redemption as { state: string }).state, (after.history as Array<{ event: string }>).map((entry) => entry.event), (after.receipts as string[]).length]).toEqual([
      'captured',
      ['held', 'captured'],
      1,
    ]);
  });
});

describe('without a signing key', () => {
  it('answers 503 signing_configuration_required (live mode without ACG_SIGNING_KEY)', async () => {
    const live = await startWorld({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'http://127.0.0.1:1' } });
    try {
      const agent = await live.createAgent('evidence-live@example.com', 'evidence-live-agent');
      await grant(live, agent.id, 5_000_000n);
      const { ledger } = live.gw.services;
      const hold = await live.gw.gateway.db.transaction((tx) =>
        ledger.hold(tx, { agentId: agent.id, acceptorId: 'gateway', merchantId: null, offerId: 'echo:say', category: 'testing', amountUc: 1_000_000n, lifetimeS: 900 }),
      );
      const res = await live.api('GET', `/v1/redemptions/${hold.id}/evidence`, { token: agent.ownerToken });
      expect([res.status, res.body.code]).toEqual([503, 'signing_configuration_required']);
      // Who may not read it still finds nothing: the refusal comes first.
      const stranger = await live.createAgent('evidence-live-stranger@example.com', 'evidence-live-stranger');
      expect((await live.api('GET', `/v1/redemptions/${hold.id}/evidence`, { token: stranger.ownerToken })).status).toBe(404);
    } finally {
      await live.close();
    }
  });
});
