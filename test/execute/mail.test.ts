// The `mail` service through POST /v1/services/execute against a real, private Dovecot IMAP server, and
// the owner's mail connector routes (password sealed at rest, never returned).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grant } from '../support/ledger-fixture.ts';
import {
  ALICE,
  CAROL,
  DOVECOT_SKIP_NOTE,
  INBOX_MESSAGE_COUNT,
  RECEIPT_CSV,
  append,
  dovecotBinary,
  holdEverySession,
  manyPartsMessage,
  provisioningClient,
  startMailFixture,
  type DovecotUser,
  type MailFixture,
} from '../support/dovecot.ts';
import { makeTestCertificate } from '../support/test-certificate.ts';
import { waitFor } from '../support/wait.ts';
import { startWorld, type World } from '../support/world.ts';
import { ONE_CREDIT_UC, availableUc, capturedFromAgent, execute, expectNothingCharged, holdsOf, newKey, runResumeJobsLater } from './helpers.ts';
import { MAIL_LOGIN_REFUSED_RETRY_AFTER_S } from '../../src/connectors/mail.ts';

const dovecot = dovecotBinary();
if (!dovecot) console.log(DOVECOT_SKIP_NOTE);

let counter = 0;
const FUNDS_UC = 20n * ONE_CREDIT_UC;
const CA_REFUSAL = 'must be PEM certificates (-----BEGIN CERTIFICATE----- …), one or more, and nothing else';

describe('mail connector routes', () => {
  let world: World;
  beforeAll(async () => {
    world = await startWorld({ env: { ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' } });
  });
  afterAll(() => world?.close());

  const settings = { host: 'imap.example.com', port: 993, tls: 'implicit', username: 'alice', password: 'correct horse battery staple' };

  it('stores the password sealed, never returns it, and reads, replaces and removes the connector', async () => {
    const agent = await world.createAgent('conn1@example.com', 'conn-agent-1', { inboxAllowlist: ['INBOX'] });
    const path = `/v1/owner/agents/${agent.id}/mail-connector`;
    const put = await world.api('PUT', path, { token: agent.ownerToken, body: settings });
    expect(put.status).toBe(200);
    expect(put.body).toEqual({
      agentId: agent.id,
      host: 'imap.example.com',
      port: 993,
      tls: 'implicit',
      username: 'alice',
      ca: null,
      inboxAllowlist: ['INBOX'],
      createdAt: expect.any(Number),
      updatedAt: expect.any(Number),
    });
    expect(JSON.stringify(put.body)).not.toContain('horse');
    const { rows } = await world.gw.gateway.db.query<Record<string, unknown>>('SELECT * FROM mail_connectors WHERE agent_id = $1', [agent.id]);
    expect(JSON.stringify(rows[0], (_k, v) => (typeof v === 'bigint' ? String(v) : v))).not.toContain('horse');
    expect(String(rows[0]!.password_sealed)).toMatch(/^v1\./);
    const get = await world.api('GET', path, { token: agent.ownerToken });
    expect(get.body).toEqual(put.body);

    const replaced = await world.api('PUT', path, { token: agent.ownerToken, body: { ...settings, port: 1993, tls: 'starttls' } });
    expect(replaced.body).toMatchObject({ port: 1993, tls: 'starttls', createdAt: put.body.createdAt });

    expect((await world.api('DELETE', path, { token: agent.ownerToken })).status).toBe(204);
    expect((await world.api('GET', path, { token: agent.ownerToken })).status).toBe(404);
    expect((await world.api('DELETE', path, { token: agent.ownerToken })).status).toBe(204);
  });

  it("refuses a messages.list cursor that is not one of the inbox's before any hold (found from outside: after a hold)", async () => {
    const agent = await world.createAgent('cursor@example.com', 'conn-agent-cursor', { inboxAllowlist: ['INBOX', 'Other'] });
    await grant(world, agent.id, FUNDS_UC);
    expect((await world.api('PUT', `/v1/owner/agents/${agent.id}/mail-connector`, { token: agent.ownerToken, body: settings })).status).toBe(200);
    for (const cursor of [Buffer.from('7.5.Other').toString('base64url'), Buffer.from('junk').toString('base64url'), Buffer.from('7.0.INBOX').toString('base64url')]) {
      const res = await execute(world, agent.token, { serviceId: 'mail', action: 'messages.list', input: { inbox: 'INBOX', cursor } });
      // The member of the action's input, named where the request holds it, as the schema names one (`errors` too).
      expect([res.status, res.body.code, res.body.detail, res.body.errors], cursor).toEqual([400, 'invalid_input', 'body/input/cursor is not valid for this inbox', [{ path: 'body/input/cursor', message: 'is not valid for this inbox' }]]);
    }
    expect(await holdsOf(world, agent.id)).toEqual([]);
  });

  it("treats another owner's agent as not found, and refuses the agent itself", async () => {
    const agent = await world.createAgent('conn2@example.com', 'conn-agent-2');
    const stranger = await world.createAgent('conn3@example.com', 'conn-agent-3');
    const path = `/v1/owner/agents/${agent.id}/mail-connector`;
    expect((await world.api('PUT', path, { token: stranger.ownerToken, body: settings })).status).toBe(404);
    const asAgent = await world.api('PUT', path, { token: agent.token, body: settings });
    expect(asAgent.status).toBe(403);
    expect(asAgent.body.code).toBe('owner_required');
  });

  it('refuses unknown members, a bad CA and an allowlist in the body (the allowlist is the agent\'s)', async () => {
    const agent = await world.createAgent('conn4@example.com', 'conn-agent-4');
    const path = `/v1/owner/agents/${agent.id}/mail-connector`;
    for (const body of [{ ...settings, allowlist: ['INBOX'] }, { ...settings, ca: 'not a certificate' }, { ...settings, port: 0 }, { ...settings, tls: 'ssl' }]) {
      const res = await world.api('PUT', path, { token: agent.ownerToken, body });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.code).toBe('invalid_input');
    }
  });

  it('takes a CA of one or more PEM certificates, and nothing else (found from outside: text after the first was kept)', async () => {
    const agent = await world.createAgent('conn-ca@example.com', 'conn-agent-ca');
    const path = `/v1/owner/agents/${agent.id}/mail-connector`;
    const [one, two] = [makeTestCertificate({ dns: ['imap.example.com'] }), makeTestCertificate({ dns: ['imap.example.com'] })];
    try {
      for (const ca of [`${one.certPem}trailing text\n`, `${one.certPem.replace('-----END CERTIFICATE-----', '')}`, `junk\n${one.certPem}`]) {
        const res = await world.api('PUT', path, { token: agent.ownerToken, body: { ...settings, ca } });
        expect([res.status, res.body.detail, res.body.errors]).toEqual([400, `body/ca ${CA_REFUSAL}`, [{ path: 'body/ca', message: CA_REFUSAL }]]);
      }
      for (const ca of [one.certPem, `${one.certPem}\n${two.certPem}`]) {
        const res = await world.api('PUT', path, { token: agent.ownerToken, body: { ...settings, ca } });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
      }
    } finally {
      one.remove();
      two.remove();
    }
  });

  it('refuses cleartext IMAP and private hosts without the test-only setting', async () => {
    const strict = await startWorld();
    try {
      const agent = await strict.createAgent('conn5@example.com', 'conn-agent-5');
      const path = `/v1/owner/agents/${agent.id}/mail-connector`;
      // Loopback in every spelling a resolver reads as it (inet_aton forms, a trailing dot), not only the canonical one.
      const hosts = ['127.0.0.1', '10.1.2.3', 'localhost', '127.1', '0177.0.0.1', '2130706433', '0x7f000001', 'localhost.', 'LOCALHOST', '0:0:0:0:0:0:0:1', '::ffff:7f00:1'];
      for (const body of [{ ...settings, tls: 'none' }, ...hosts.map((host) => ({ ...settings, host }))]) {
        const res = await strict.api('PUT', path, { token: agent.ownerToken, body });
        expect(res.status, JSON.stringify(body)).toBe(400);
        expect(res.body.code).toBe('invalid_input');
        // The member refused, as the schema names one: in detail, and in errors.
        const member = body.tls === 'none' ? 'body/tls' : 'body/host';
        expect([res.body.detail.startsWith(`${member} `), res.body.errors], JSON.stringify(body)).toEqual([true, [{ path: member, message: expect.any(String) }]]);
      }
      // A host with a port in it, which never resolves (found from outside: stored, then every execution failed).
      for (const host of ['127.0.0.1:34741', 'imap.example.com:993', 'a:b', '1.2.3.4:5']) {
        const res = await strict.api('PUT', path, { token: agent.ownerToken, body: { ...settings, host } });
        expect([res.status, res.body.detail, res.body.errors?.[0]?.path], host).toEqual([400, `body/host "${host}" is neither a DNS name nor an IP address; give the port as \`port\``, 'body/host']);
      }
      // Names that never lead to a public server, refused by the rule merchant domains and webhook hosts keep (found
      // from outside: stored, then refused at every execution).
      for (const [host, reason] of [['mail.internal', '.internal is a special-use name'], ['imap.corp', '.corp is a special-use name'], ['mailhost', 'at least two labels'], ['imap.test.', '.test is a special-use name']]) {
        const res = await strict.api('PUT', path, { token: agent.ownerToken, body: { ...settings, host } });
        expect([res.status, res.body.code], host).toEqual([400, 'invalid_input']);
        expect(res.body.detail, host).toContain(reason);
        expect(res.body.detail.startsWith(`body/host "${host}" is not a public DNS name (`), res.body.detail).toBe(true);
      }
      expect((await strict.api('PUT', path, { token: agent.ownerToken, body: { ...settings, host: '2606:4700:4700::1111' } })).status).toBe(200);
      expect((await strict.api('PUT', path, { token: agent.ownerToken, body: { ...settings, host: 'imap.fastmail.com' } })).status).toBe(200);
      expect((await strict.api('PUT', path, { token: agent.ownerToken, body: { ...settings, host: 'IMAP.Example.COM.' } })).status).toBe(200);
    } finally {
      await strict.close();
    }
  });

  it('answers 503 runtime_configuration_required in live mode without a secret box key', async () => {
    const live = await startWorld({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'http://127.0.0.1:1' } });
    try {
      const agent = await live.createAgent('conn6@example.com', 'conn-agent-6');
      const res = await live.api('PUT', `/v1/owner/agents/${agent.id}/mail-connector`, { token: agent.ownerToken, body: settings });
      expect(res.status).toBe(503);
      expect(res.body.code).toBe('runtime_configuration_required');
    } finally {
      await live.close();
    }
  });
});

describe.skipIf(!dovecot)('mail through execute against a real Dovecot', () => {
  let world: World;
  let fixture: MailFixture;

  beforeAll(async () => {
    fixture = await startMailFixture();
    world = await startWorld({ env: { ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' } });
  });
  afterAll(async () => {
    await world?.close();
    await fixture?.server.stop();
  });

  /** An agent of ALICE's account (by default) with INBOX and Receipts allowed, over implicit TLS when the fixture has it. */
  async function mailAgent(password = ALICE.password, options: { user?: DovecotUser; inboxes?: string[]; fundsUc?: bigint; on?: World } = {}) {
    counter += 1;
    const on = options.on ?? world;
    const agent = await on.createAgent(`mail${counter}@example.com`, `mail-agent-${counter}`, { inboxAllowlist: options.inboxes ?? ['INBOX', 'Receipts'] });
    if ((options.fundsUc ?? FUNDS_UC) > 0n) await grant(on, agent.id, options.fundsUc ?? FUNDS_UC);
    const { server } = fixture;
    const connection = server.tls
      ? { host: server.host, port: server.tls.port, tls: 'implicit', ca: server.tls.certPem }
      : { host: server.host, port: server.port, tls: 'none' };
    const put = await on.api('PUT', `/v1/owner/agents/${agent.id}/mail-connector`, {
      token: agent.ownerToken,
      body: { ...connection, username: (options.user ?? ALICE).username, password },
    });
    expect(put.status).toBe(200);
    return agent;
  }

  it('inboxes.list returns the allowlisted inboxes with counts, and charges one credit', async () => {
    const agent = await mailAgent();
    const res = await execute(world, agent.token, { serviceId: 'mail', action: 'inboxes.list', input: {} });
    expect(res.status).toBe(200);
    expect(res.body.result).toEqual({
      inboxes: [
        { name: 'INBOX', specialUse: '\\Inbox', messages: INBOX_MESSAGE_COUNT, unseen: 3 },
        { name: 'Receipts', specialUse: null, messages: 3, unseen: 2 },
      ],
    });
    expect(res.body.receipt).toMatchObject({ offerId: 'mail:inboxes.list', category: 'email', state: 'captured', capturedUc: '1000000' });
    expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
  });

  it('messages.list pages newest first with a cursor, one credit per page', async () => {
    const agent = await mailAgent();
    const uids: number[] = [];
    let cursor: string | undefined;
    const sizes: number[] = [];
    for (let page = 0; page < 5; page += 1) {
      const res = await execute(world, agent.token, { serviceId: 'mail', action: 'messages.list', input: { inbox: 'INBOX', limit: 3, ...(cursor ? { cursor } : {}) } });
      expect(res.status).toBe(200);
      sizes.push(res.body.result.messages.length);
      uids.push(...res.body.result.messages.map((m: { uid: number }) => m.uid));
      cursor = res.body.result.nextCursor ?? undefined;
      if (!cursor) break;
    }
    expect(sizes).toEqual([3, 3, 1]);
    expect(uids).toEqual([...fixture.uids.alice.INBOX].reverse());
    expect(await capturedFromAgent(world, agent.id)).toBe(3n * ONE_CREDIT_UC);
    expect(await availableUc(world, agent.id)).toBe(FUNDS_UC - 3n * ONE_CREDIT_UC);
  });

  it('messages.get returns the multipart receipt parsed: headers, text, html and attachment metadata', async () => {
    const agent = await mailAgent();
    const res = await execute(world, agent.token, { serviceId: 'mail', action: 'messages.get', input: { inbox: 'Receipts', uid: fixture.uids.alice.Receipts.receipt } });
    expect(res.status).toBe(200);
    expect(res.body.result).toMatchObject({
      uid: fixture.uids.alice.Receipts.receipt,
      truncated: false,
      headers: {
        messageId: '<receipt-1001@shop.example>',
        subject: 'Your receipt #1001',
        from: [{ name: 'Shop', address: 'orders@shop.example' }],
        cc: [{ name: null, address: 'accounts@example.test' }],
        inReplyTo: '<order-1001@example.test>',
      },
      attachments: [{ filename: 'receipt.csv', contentType: 'text/csv', size: Buffer.byteLength(RECEIPT_CSV), contentId: null }],
    });
    expect(res.body.result.text).toContain('Total: 29.99 EUR');
    expect(res.body.result.html).toContain('<b>order</b>');
    expect(JSON.stringify(res.body.result)).not.toContain(Buffer.from(RECEIPT_CSV).toString('base64'));
    expect(await capturedFromAgent(world, agent.id)).toBe(ONE_CREDIT_UC);
  });

  it('refuses a mailbox off the allowlist with 403 inbox_not_allowed before any hold', async () => {
    const agent = await mailAgent();
    for (const [action, input] of [
      ['messages.list', { inbox: 'Private' }],
      ['messages.get', { inbox: 'Private', uid: fixture.uids.alice.Private[0] }],
      ['messages.get', { inbox: 'receipts', uid: 1 }],
    ] as const) {
      const res = await execute(world, agent.token, { serviceId: 'mail', action, input });
      expect(res.status).toBe(403);
      expect(res.body).toMatchObject({ code: 'inbox_not_allowed', charged: false });
    }
    expect(await holdsOf(world, agent.id)).toEqual([]);
  });

  it('refuses inboxes.list with 403 inbox_not_allowed before any hold when the agent allows no inbox', async () => {
    const agent = await mailAgent(ALICE.password, { inboxes: [] });
    const res = await execute(world, agent.token, { serviceId: 'mail', action: 'inboxes.list', input: {} });
    expect(res.status).toBe(403);
    expect(res.body).toMatchObject({ code: 'inbox_not_allowed', charged: false });
    expect(await holdsOf(world, agent.id)).toEqual([]);
  });

  it('refuses an agent without a mail connector with 409 connector_not_configured before any hold', async () => {
    const agent = await world.createAgent('no-connector@example.com', 'no-connector', { inboxAllowlist: ['INBOX'] });
    await grant(world, agent.id, FUNDS_UC);
    const res = await execute(world, agent.token, { serviceId: 'mail', action: 'inboxes.list', input: {} });
    expect(res.status).toBe(409);
    expect(res.body).toMatchObject({ code: 'connector_not_configured', charged: false });
    expect(await holdsOf(world, agent.id)).toEqual([]);
  });

  // Before any refused password: Dovecot delays every later login from the same address a little.
  it('answers a login refused for the number of sessions (NO [LIMIT]) with 502 upstream_unavailable and a Retry-After, not upstream_auth_failed; the key is given back (found from outside)', async () => {
    const agent = await mailAgent(CAROL.password, { user: CAROL, inboxes: ['INBOX'] });
    const key = newKey('mail-limit');
    const release = await holdEverySession(fixture.server, CAROL);
    let refused;
    try {
      refused = await execute(world, agent.token, { serviceId: 'mail', action: 'inboxes.list', input: {} }, key);
    } finally {
      await release();
    }
    expect([refused.status, refused.headers.get('retry-after')]).toEqual([502, String(MAIL_LOGIN_REFUSED_RETRY_AFTER_S)]);
    expect(refused.body).toMatchObject({ code: 'upstream_unavailable', charged: false, executionId: expect.any(String), redemptionId: expect.any(String) });
    await expectNothingCharged(world, agent.id, FUNDS_UC);
    // Not kept under the key: once the sessions have ended, the same request runs.
    const ran = await waitFor(() => execute(world, agent.token, { serviceId: 'mail', action: 'inboxes.list', input: {} }, key), {
      until: (res) => res.status !== 502,
      what: 'the retry to run once the held sessions ended',
    });
    expect(ran.status, JSON.stringify(ran.body)).toBe(200);
  });

  it('answers a refused login with 502 upstream_auth_failed and releases the hold', async () => {
    const agent = await mailAgent('wrong-password');
    const res = await execute(world, agent.token, { serviceId: 'mail', action: 'inboxes.list', input: {} });
    expect(res.status).toBe(502);
    expect(res.body).toMatchObject({ code: 'upstream_auth_failed', charged: false });
    expect((await holdsOf(world, agent.id)).map((h) => h.state)).toEqual(['released']);
    await expectNothingCharged(world, agent.id, FUNDS_UC);
  });

  it("stops resuming an intent whose login the mail server refuses: the password is the owner's to fix, and the back-off would fail a login about 170 times (found from outside)", async () => {
    const paid = await startWorld({ env: { ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true', ACG_PAYMENT_PROVIDER: 'local' } });
    try {
      const agent = await mailAgent('wrong-password', { fundsUc: 0n, on: paid });
      const asked = await execute(paid, agent.token, { serviceId: 'mail', action: 'inboxes.list', input: {} }, newKey('mail-wrong-password'));
      expect(asked.status, JSON.stringify(asked.body)).toBe(402);
      const topupId = asked.body.payment.id as string;
      expect((await paid.api('POST', `/v1/payments/topups/${topupId}/approve`, { token: agent.ownerToken, body: {} })).body.status).toBe('settled');
      await waitFor(async () => (await paid.api('GET', `/v1/intents/${asked.body.intentId}`, { token: agent.token })).body.lastAttempt, {
        until: (attempt) => attempt !== null,
        what: 'the resume after the approval to fail its login',
      });
      await runResumeJobsLater(paid);
      // One login, the resume's: before, each pass of the resume job logged in again, and failed.
      expect((await holdsOf(paid, agent.id)).map((hold) => hold.state)).toEqual(['released']);
      expect((await paid.api('GET', `/v1/intents/${asked.body.intentId}`, { token: agent.token })).body).toMatchObject({
        state: 'pending',
        lastAttempt: { retried: false, error: { code: 'upstream_auth_failed' } },
      });
    } finally {
      await paid.close();
    }
  });

  it('answers a message the parser refuses with 422 upstream_unprocessable, charges nothing, and keeps the answer: a replay, and a retained intent that ends failed instead of waiting (found from outside)', async () => {
    const client = provisioningClient(fixture.server, ALICE);
    await client.connect();
    await client.mailboxCreate('Bombs');
    const uid = await append(client, 'Bombs', manyPartsMessage(1_500));
    await client.logout();
    const request = { serviceId: 'mail', action: 'messages.get', input: { inbox: 'Bombs', uid } };

    const agent = await mailAgent(ALICE.password, { inboxes: ['Bombs'] });
    const key = newKey('mail-bomb');
    const res = await execute(world, agent.token, request, key);
    expect([res.status, res.body], JSON.stringify(res.body)).toMatchObject([
      422,
      { code: 'upstream_unprocessable', charged: false, executionId: expect.any(String), redemptionId: expect.any(String) },
    ]);
    expect(res.body.detail).toContain('could not be parsed');
    await expectNothingCharged(world, agent.id, FUNDS_UC);
    const replay = await execute(world, agent.token, request, key);
    expect([replay.status, replay.headers.get('idempotent-replayed'), replay.body.executionId]).toEqual([422, 'true', res.body.executionId]);

    // Retained for want of credit, the request fails for good once it runs: retrying it would parse the same message.
    const poor = await mailAgent(ALICE.password, { inboxes: ['Bombs'], fundsUc: 0n });
    const intentKey = newKey('mail-bomb-intent');
    const retained = await execute(world, poor.token, request, intentKey);
    expect(retained.body.intentId, JSON.stringify(retained.body)).toEqual(expect.any(String));
    await grant(world, poor.id, FUNDS_UC);
    expect((await execute(world, poor.token, request, intentKey)).status).toBe(422);
    expect((await world.api('GET', `/v1/intents/${retained.body.intentId}`, { token: poor.token })).body).toMatchObject({ state: 'failed', error: { code: 'upstream_unprocessable' } });
  });

  it('answers an inbox that is allowed but missing with 404 upstream_not_found and releases the hold', async () => {
    const agent = await mailAgent();
    await world.api('PATCH', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken, body: { inboxAllowlist: ['INBOX', 'Archive'] } });
    const res = await execute(world, agent.token, { serviceId: 'mail', action: 'messages.list', input: { inbox: 'Archive' } });
    expect(res.status).toBe(404);
    expect(res.body).toMatchObject({ code: 'upstream_not_found', charged: false });
    await expectNothingCharged(world, agent.id, FUNDS_UC);
  });
});
