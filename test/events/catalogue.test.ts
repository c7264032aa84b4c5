import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent, EVENT_TYPES, OWNER_EVENT_TYPES } from '../../src/events/outbox.ts';
import { markVerified, registerMerchant } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let document: any;

beforeAll(async () => {
  world = await startWorld();
  document = (await world.api('GET', '/openapi.json')).body;
});
afterAll(() => world.close());

describe('the event catalogue in the OpenAPI document', () => {
  it('lists every event type under the top-level webhooks, with its headers and payload schema', () => {
    expect(Object.keys(document.webhooks).sort()).toEqual([...EVENT_TYPES].sort());
    for (const type of EVENT_TYPES) {
      const operation = document.webhooks[type].post;
      expect(operation.parameters.map((p: { name: string }) => p.name)).toEqual(['webhook-id', 'webhook-timestamp', 'webhook-signature']);
      const schema = operation.requestBody.content['application/json'].schema;
      expect(schema.properties.type.const).toBe(type);
      const account = (OWNER_EVENT_TYPES as readonly string[]).includes(type) ? 'ownerId' : 'merchantId';
      expect(schema.required).toContain(account);
      expect(schema.properties[account]).toEqual({ type: 'string' });
      if (type === 'webhook.disabled') {
        expect(schema.properties.data.properties.webhook.required).toEqual(['reason', 'failingSince', 'consecutiveFailures']);
        // Recorded, never sent: its description says so rather than the delivery schedule (found from outside).
        expect(operation.description).toMatch(/^Never sent to a webhook, and never re-sent \(409\)/);
      } else if (type === 'budget.threshold') {
        expect(schema.properties.data.required).toEqual(['agentId', 'thresholdPct', 'budget']);
      } else {
        const [member, component] =
          type === 'merchant.verified'
            ? ['merchant', 'Merchant']
            : type.startsWith('topup.')
              ? ['topup', 'Topup']
              : type.startsWith('intent.')
                ? ['intent', 'IntentStatus']
                : type.startsWith('purchase.')
                  ? ['purchase', 'PurchaseApproval']
                  : type === 'voucher.revoked'
                    ? ['revocation', 'VoucherRevocation']
                    : ['redemption', 'Redemption'];
        expect(schema.properties.data.properties[member!].$ref).toBe(`#/components/schemas/${component}`);
        expect(document.components.schemas[component!]).toBeDefined();
      }
      expect(Object.keys(operation.responses)).toEqual(['2XX']);
    }
    // Verification comes before any webhook can exist: the document says how the event reaches one (found from outside).
    expect(document.webhooks['merchant.verified'].post.description).toContain('reaches a webhook only when re-sent (POST /v1/merchants/{id}/events/{eventId}/resend)');
    // The endpoint's pause after failures in a row moves attempts off the schedule: the document says so (found from outside).
    for (const type of ['redemption.captured', 'budget.threshold']) {
      expect(document.webhooks[type].post.description).toContain('5 failed attempts in a row to the endpoint, whatever their events, pause it: no attempt for 30 s, doubling with each further failure up to 10 min');
    }
    expect(document.components.schemas.Merchant).toBeDefined();
    expect(document.components.schemas.Redemption.required).toEqual(expect.arrayContaining(['id', 'agentId', 'state', 'allocations']));
  });

  it('describes the payload the gateway really stores for merchant.verified', async () => {
    // The stored event of a verification, made the way verify-domain makes it (see verify-domain.test.ts for the real DNS path).
    const token = await world.humanToken('alice@example.com');
    const { merchant } = await registerMerchant(world, token);
    await markVerified(world, merchant.id);
    const verified = (await world.api('GET', `/v1/merchants/${merchant.id}`, { token })).body.merchant;
    const event = await world.gw.gateway.db.transaction((tx) =>
      emitEvent(tx, { merchantId: merchant.id, type: 'merchant.verified', data: { merchant: verified }, nowMs: world.gw.clock.nowMs() }),
    );
    const envelope = document.webhooks['merchant.verified'].post.requestBody.content['application/json'].schema;
    expect(Object.keys(event).sort()).toEqual([...envelope.required].sort());
    expect(Object.keys(event.data)).toEqual(Object.keys(envelope.properties.data.properties));
    expect(Object.keys(event.data.merchant as object).sort()).toEqual(Object.keys(document.components.schemas.Merchant.properties).sort());
    expect(document.components.schemas.Merchant.required.sort()).toEqual(Object.keys(event.data.merchant as object).sort());
  });
});
