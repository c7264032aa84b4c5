// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Webhook } from 'standardwebhooks';
import { SystemClock } from '../../src/platform/clock.ts';
import {
  newWebhookSecret,
  nextAttemptDelayS,
  RETRY_SCHEDULE_S,
  sendWebhookAttempt,
  signWebhook,
  type WebhookDelivery,
} from '../../src/events/webhook-sender.ts';
import { startWebhookReceiver, type WebhookReceiver } from '../support/webhook-receiver.ts';
import { makeTestCertificate, type TestCertificate } from '../support/test-certificate.ts';

const secret = newWebhookSecret();
const clock = new SystemClock();
let receiver: WebhookReceiver;
let tlsReceiver: WebhookReceiver;
let cert: TestCertificate;

beforeAll(async () => {
  receiver = await startWebhookReceiver({ secret });
  cert = makeTestCertificate({ ip: ['127.0.0.1'] });
  tlsReceiver = await startWebhookReceiver({ secret, tls: cert });
});
afterAll(async () => {
  await receiver.close();
  await tlsReceiver.close();
  cert.remove();
});

function delivery(url: string, payload: unknown = { type: 'redemption.released', data: { id: 'red_1' } }): WebhookDelivery {
  return { url, secret, messageId: `msg_${Math.random().toString(36).slice(2)}`, payload };
}

describe('newWebhookSecret', () => {
  it('is whsec_ followed by 32 random bytes in base64, different every time', () => {
    const first = newWebhookSecret();
    expect(first).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(first.slice('whsec_'.length), 'base64')).toHaveLength(32);
    expect(newWebhookSecret()).not.toBe(first);
  });
});

describe('sendWebhookAttempt', () => {
  it('delivers a signed JSON body that the reference library verifies', async () => {
    receiver.answerWith(204);
    const sent = delivery(`${receiver.url}/hooks/acg`);
    const outcome = await sendWebhookAttempt(sent, { clock, allowPrivateNetworkTargets: true });
    expect(outcome).toMatchObject({ ok: true, status: 204 });
    expect(outcome.durationMs).toBeGreaterThanOrEqual(0);
    const got = receiver.received.at(-1)!;
    expect(got).toMatchObject({ method: 'POST', path: '/hooks/acg', verified: true });
    expect(got.headers['content-type']).toBe('application/json');
    expect(got.headers['webhook-id']).toBe(sent.messageId);
    expect(Math.abs(Number(got.headers['webhook-timestamp']) - clock.nowS())).toBeLessThanOrEqual(5);
    expect(JSON.parse(got.body)).toEqual(sent.payload);
  });

  it('delivers over TLS with an extra trusted CA', async () => {
    tlsReceiver.answerWith(200);
    const outcome = await sendWebhookAttempt(delivery(`${tlsReceiver.url}/tls`), { clock, allowPrivateNetworkTargets: true, ca: cert.certPem });
    expect(outcome).toMatchObject({ ok: true, status: 200 });
    expect(tlsReceiver.received.at(-1)?.verified).toBe(true);
  });

  it('signs with the timestamp of the clock it is given', async () => {
    receiver.answerWith(200);
    const late = new SystemClock();
    // Frozen: the header is read at send time and compared after it, and a running clock may cross a second between.
    late.freeze();
    late.advance(3_600_000);
    await sendWebhookAttempt(delivery(`${receiver.url}/late`), { clock: late, allowPrivateNetworkTargets: true });
    const got = receiver.received.at(-1)!;
    expect(Number(got.headers['webhook-timestamp'])).toBe(late.nowS());
    // An hour in the future is outside the receiver's tolerance: replay protection works on our timestamp.
    expect(got.verified).toBe(false);
  });

  it('reports a 500 answer as a failure with its status', async () => {
    receiver.answerWith(500);
    expect(await sendWebhookAttempt(delivery(`${receiver.url}/x`), { clock, allowPrivateNetworkTargets: true })).toMatchObject({
      ok: false,
      status: 500,
      error: 'status_not_2xx',
    });
  });

  it('reports a redirect as a failure and does not follow it', async () => {
    receiver.answerWith(302);
    const before = receiver.received.length;
    const outcome = await sendWebhookAttempt(delivery(`${receiver.url}/moved`), { clock, allowPrivateNetworkTargets: true });
    expect(outcome).toMatchObject({ ok: false, status: 302 });
    expect(receiver.received.length).toBe(before + 1);
  });

  it('never connects to a private address without the test-only relaxation', async () => {
    receiver.answerWith(200);
    const before = receiver.received.length;
    for (const url of [`${receiver.url}/x`, `http://localhost:${receiver.port}/x`, `http://[::ffff:127.0.0.1]:${receiver.port}/x`]) {
      expect(await sendWebhookAttempt(delivery(url), { clock, allowPrivateNetworkTargets: false })).toMatchObject({
        ok: false,
        error: 'forbidden_address',
      });
    }
    expect(receiver.received.length).toBe(before);
  });

  it('counts a 2xx whose body trickles without end as delivered at once, not as a timeout', async () => {
    // Headers at once, then a byte every 100 ms for as long as the connection lasts.
    const trickling = http.createServer((_req, res) => {
      res.writeHead(200).flushHeaders();
      const timer = setInterval(() => res.write('.'), 100);
      res.on('close', () => clearInterval(timer));
    });
    await new Promise<void>((resolve) => trickling.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(trickling.address() as AddressInfo).port}/slow-body`;
      const outcome = await sendWebhookAttempt(delivery(url), { clock, allowPrivateNetworkTargets: true, timeoutMs: 2_000 });
      expect(outcome).toMatchObject({ ok: true, status: 200 });
      expect(outcome).not.toHaveProperty('error');
      expect(outcome.durationMs).toBeLessThan(1_000);
    } finally {
      trickling.closeAllConnections();
      await new Promise((resolve) => trickling.close(resolve));
    }
  });

  // Found from outside (bb120): a 200 with 80 KB of headers read `request_failed`, "the request failed", with no code.
  it('reports a 200 whose headers are over the client limit as invalid_response, saying so with the system code', async () => {
    const headers = Object.fromEntries(Array.from({ length: 200 }, (_, i) => [`x-filler-${i}`, 'a'.repeat(400)]));
    receiver.answerWith(200, headers);
    try {
      const outcome = await sendWebhookAttempt(delivery(`${receiver.url}/huge-headers`), { clock, allowPrivateNetworkTargets: true });
      expect(outcome).toMatchObject({ ok: false, error: 'invalid_response', message: `the answer's headers are over ${http.maxHeaderSize} bytes (UND_ERR_HEADERS_OVERFLOW)` });
      expect(outcome).not.toHaveProperty('status');
    } finally {
      receiver.answerWith(200);
    }
  });

  it('says what a failed attempt met, in words, beside its code', async () => {
    receiver.answerWith(503);
    expect(await sendWebhookAttempt(delivery(`${receiver.url}/x`), { clock, allowPrivateNetworkTargets: true })).toMatchObject({
      error: 'status_not_2xx',
      message: 'the receiver answered 503',
    });
    receiver.answerWith(200);
    const unreachable = await sendWebhookAttempt(delivery('http://127.0.0.1:1/x'), { clock, allowPrivateNetworkTargets: true, timeoutMs: 1_000 });
    expect(unreachable).toMatchObject({ error: 'connect_failed', message: 'could not connect (ECONNREFUSED)' });
  });

  it('reports an unreachable receiver as a failure instead of throwing', async () => {
    const outcome = await sendWebhookAttempt(delivery('http://127.0.0.1:1/x'), { clock, allowPrivateNetworkTargets: true, timeoutMs: 1_000 });
    expect(outcome).toMatchObject({ ok: false, error: 'connect_failed' });
  });
});

describe('signWebhook', () => {
  it('produces headers the reference library verifies for the exact body', () => {
    const body = JSON.stringify({ a: 1 });
    const headers = signWebhook(secret, 'msg_1', clock.nowS(), body);
    expect(new Webhook(secret).verify(body, headers)).toEqual({ a: 1 });
    expect(() => new Webhook(secret).verify(`${body} `, headers)).toThrow();
  });

  it('refuses a message id containing a dot (it would make the signed text ambiguous)', () => {
    expect(() => signWebhook(secret, 'msg.1', 1, '{}')).toThrow(RangeError);
  });
});

describe('retry schedule', () => {
  it('is immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, then dead-letter', () => {
    expect(RETRY_SCHEDULE_S).toEqual([0, 5, 300, 1800, 7200, 18000, 36000, 36000]);
    expect([0, 1, 2, 3, 4, 5, 6, 7].map(nextAttemptDelayS)).toEqual([...RETRY_SCHEDULE_S]);
    expect(nextAttemptDelayS(8)).toBeNull();
    expect(nextAttemptDelayS(100)).toBeNull();
    expect(() => nextAttemptDelayS(-1)).toThrow(RangeError);
    expect(() => nextAttemptDelayS(1.5)).toThrow(RangeError);
  });
});
