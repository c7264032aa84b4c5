// A secret the gateway generates (merchant API key, webhook signing secret) appears exactly once: in the
// response that created it. Not in replays, lists or reads, not in the stored idempotency record, and not
// in the logs of a gateway logging at info with the production logger.
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { emitEvent } from '../../src/events/outbox.ts';
import { WEBHOOK_SECRET_REPLAY_NOTICE } from '../../src/events/service.ts';
import { createLogger } from '../../src/platform/gateway.ts';
import { configureWebhook, markVerified, registerMerchant, startHookTarget, uniqueKey, type HookTarget } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

const logLines: string[] = [];
const sink = new Writable({
  write(chunk: Buffer, _encoding, done) {
    logLines.push(chunk.toString('utf8'));
    done();
  },
});

let world: World;
let target: HookTarget;

beforeAll(async () => {
  target = await startHookTarget();
  world = await startWorld({
    env: { LOG_LEVEL: 'info', ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' },
    outbound: target.outbound,
    log: createLogger({ logLevel: 'info' }, sink), // the production logger, writing into `logLines`
  });
});
afterAll(async () => {
  await world?.close();
  await target?.close();
});

/** Every place a secret could leak to besides its one response. */
async function everywhereElse(): Promise<string> {
  const { rows } = await world.gw.gateway.db.query<{ response_body: string | null; response_headers: string | null }>(
    'SELECT response_body, response_headers FROM idempotency_keys',
  );
  return [logLines.join('\n'), ...rows.map((r) => `${r.response_body}\n${r.response_headers}`)].join('\n');
}

describe('secrets appear exactly once', () => {
  it('an API key is in its creation response only', async () => {
    const token = await world.humanToken('alice@example.com');
    const { merchant } = await registerMerchant(world, token, { domain: 'secret-keys.com' });
    const key = uniqueKey();
    const body = { name: 'server', scopes: ['webhooks:read', 'offers:read'] };
    const created = await world.api('POST', `/v1/merchants/${merchant.id}/api-keys`, { token, key, body });
    expect(created.status).toBe(201);
    const plaintext: string = created.body.secretKey;
    const secretPart = plaintext.slice(-43);

    const seen: string[] = [];
    const replay = await world.api('POST', `/v1/merchants/${merchant.id}/api-keys`, { token, key, body });
    seen.push(JSON.stringify(replay.body), JSON.stringify((await world.api('GET', `/v1/merchants/${merchant.id}/api-keys`, { token })).body));
    // Using the key (and a failing use of it) must not log it either.
    seen.push(JSON.stringify((await world.api('GET', `/v1/merchants/${merchant.id}/webhook`, { token: plaintext })).body));
    seen.push(JSON.stringify((await world.api('GET', `/v1/merchants/${merchant.id}/webhook?access_token=${plaintext}`)).body));
    seen.push(JSON.stringify((await world.api('POST', '/v1/merchants', { token: plaintext, key: uniqueKey(), body: {} })).body));
    await world.api('POST', `/v1/merchants/${merchant.id}/api-keys/${created.body.apiKey.keyId}/revoke`, { token });
    seen.push(JSON.stringify((await world.api('GET', `/v1/merchants/${merchant.id}/webhook`, { token: plaintext })).body));

    expect(replay.body.apiKey).toEqual(created.body.apiKey);
    expect(logLines.length).toBeGreaterThan(5); // the gateway did log these requests
    const elsewhere = `${seen.join('\n')}\n${await everywhereElse()}`;
    expect(elsewhere).not.toContain(secretPart);
    expect(elsewhere).not.toContain(plaintext);
  });

  it('a webhook secret is in its PUT response only, and deliveries do not log it', async () => {
    const token = await world.humanToken('bob@example.com');
    const { merchant } = await registerMerchant(world, token);
    await markVerified(world, merchant.id);
    const key = uniqueKey();
    const created = await configureWebhook(world, token, merchant.id);
    expect(created.status).toBe(200);
    const secret: string = created.body.webhookSecret;
    target.receiver.useSecret(secret);

    const url = `https://hooks.shop-test.com/acg/events`;
    // A PUT keeps the secret unless asked to rotate it; a rotation shows the new one once.
    const first = await world.api('PUT', `/v1/merchants/${merchant.id}/webhook`, { token, key, body: { url, rotateSecret: true } });
    const replay = await world.api('PUT', `/v1/merchants/${merchant.id}/webhook`, { token, key, body: { url, rotateSecret: true } });
    expect(replay.body).toEqual({ configuration: first.body.configuration, notice: WEBHOOK_SECRET_REPLAY_NOTICE });
    target.receiver.useSecret(first.body.webhookSecret);
    await world.gw.gateway.db.transaction((tx) =>
      emitEvent(tx, { merchantId: merchant.id, type: 'redemption.held', data: { redemption: { id: 'red_log' } }, nowMs: world.gw.clock.nowMs() }),
    );
    expect(await world.gw.services.webhookWorker.runOnce()).toMatchObject({ succeeded: 1 });
    expect(target.receiver.received.at(-1)?.verified).toBe(true);

    const seen = [
      JSON.stringify(replay.body),
      JSON.stringify((await world.api('GET', `/v1/merchants/${merchant.id}/webhook`, { token })).body),
      JSON.stringify((await world.api('GET', `/v1/merchants/${merchant.id}`, { token })).body),
      JSON.stringify((await world.api('GET', `/v1/merchants/${merchant.id}/webhook/deliveries`, { token })).body),
    ];
    expect(logLines.some((line) => line.includes('webhook attempt'))).toBe(true);
    const elsewhere = `${seen.join('\n')}\n${await everywhereElse()}`;
    for (const value of [secret, first.body.webhookSecret]) {
      expect(elsewhere).not.toContain(value);
      expect(elsewhere).not.toContain(value.slice('whsec_'.length));
    }
  });
});
