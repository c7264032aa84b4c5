// The dev DNS zone: dev mode serves TXT records over DNS-over-HTTPS (RFC 8484) and verifies merchant
// domains against it by default, through the same DoH client as live mode. Live mode has no such zone.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import dnsPacket from 'dns-packet';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveTxt, ResolverError } from '../../src/merchants/doh.ts';
import { acceptedOperatorHash, checkOperator, sha256Hex } from '../../src/operator/credential.ts';
import { ConfigError, loadConfig } from '../../src/platform/config.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { markVerified, registerMerchant, uniqueKey } from '../support/merchants.ts';
import { startWorld, type World } from '../support/world.ts';

const run = promisify(execFile);

describe('the dev DNS zone (dev mode)', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-devzone-'));
  let world: World;
  let owner: string;
  let operator: string;

  beforeAll(async () => {
    world = await startWorld({ env: { ACG_DATA_DIR: dataDir } });
    owner = await world.humanToken('zone-owner@example.com');
    operator = readFileSync(path.join(dataDir, 'operator-token'), 'utf8').trim();
  });
  afterAll(async () => {
    await world?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const publish = (body: unknown, token = operator) => world.api('POST', '/dev/dns/records', { token, body });
  const verify = (merchantId: string) => world.api('POST', `/v1/merchants/${merchantId}/verify-domain`, { token: owner, key: uniqueKey('verify') });

  it('is the default resolver of dev mode, asked at the address the gateway listens on', () => {
    expect(world.gw.config.doh.devZone).toBe(true);
    expect(world.gw.services.doh).toMatchObject({ resolverUrl: `${world.url}/dev/dns-query`, devZoneCleartext: true });
  });

  it("verifies a merchant once its record is published: 200 verified", async () => {
    const { merchant, dnsRecord } = await registerMerchant(world, owner, { domain: 'published.example.com' });
    const published = await publish({ merchantId: merchant.id });
    expect(published.status).toBe(200);
    expect(published.body.record).toEqual(dnsRecord);
    const verified = await verify(merchant.id);
    expect(verified.status).toBe(200);
    expect(verified.body).toMatchObject({ verified: true, merchant: { id: merchant.id, verified: true } });
  });

  it('is no proof for live mode: a live gateway on the same database takes back what the dev zone verified, and only that', async () => {
    const { merchant: inZone } = await registerMerchant(world, owner, { domain: 'zone-proven.example.com' });
    expect((await publish({ merchantId: inZone.id })).status).toBe(200);
    expect((await verify(inZone.id)).status).toBe(200);
    const { merchant: elsewhere } = await registerMerchant(world, owner, { domain: 'dns-proven.example.com' });
    await markVerified(world, elsewhere.id); // as a real resolver's record would
    const verifiedNow = async () =>
      Object.fromEntries(
        (await world.gw.gateway.db.query<{ id: string; verified: boolean }>('SELECT id, verified FROM merchants WHERE id = ANY($1::text[])', [[inZone.id, elsewhere.id]])).rows.map((row) => [row.id, row.verified]),
      );
    expect(await verifiedNow()).toEqual({ [inZone.id]: true, [elsewhere.id]: true });
    const live = await startTestGateway({
      database: world.gw.database,
      env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com', ACG_OPERATOR_TOKEN_SHA256: sha256Hex('acg_op_live-zone') },
    });
    try {
      expect(await verifiedNow()).toEqual({ [inZone.id]: false, [elsewhere.id]: true });
      // It proves its domain again, with the same record, through the resolver of the day (here dev mode's zone).
      const again = await verify(inZone.id);
      expect(again.status).toBe(200);
      expect(await verifiedNow()).toEqual({ [inZone.id]: true, [elsewhere.id]: true });
    } finally {
      await live.close();
    }
  });

  it('answers 409 domain_verification_pending while the record is absent, or present with a wrong value', async () => {
    const { merchant, dnsRecord } = await registerMerchant(world, owner, { domain: 'pending.example.com' });
    const absent = await verify(merchant.id);
    expect(absent.status).toBe(409);
    expect(absent.body).toMatchObject({ code: 'domain_verification_pending', verified: false, dnsRecord });
    // Waiting never helps a dev gateway, which reads its own zone: the refusal says how to publish there (found from
    // outside: the console said DNS takes a few minutes).
    expect(absent.body.detail).toContain(`npx acg dev dns publish --merchant ${merchant.id}`);

    expect((await publish({ name: dnsRecord.name, value: `${dnsRecord.value}x` })).status).toBe(200);
    expect((await publish({ name: dnsRecord.name, value: 'v=spf1 -all' })).status).toBe(200);
    const wrong = await verify(merchant.id);
    expect(wrong.status).toBe(409);
    expect(wrong.body.code).toBe('domain_verification_pending');

    // Publishing the right value next to the wrong ones is enough: any one record may match.
    expect((await publish({ merchantId: merchant.id })).status).toBe(200);
    expect((await verify(merchant.id)).status).toBe(200);
  });

  it('serves RFC 8484 over POST and GET: the TXT values at a name, NXDOMAIN elsewhere', async () => {
    const long = 'a'.repeat(300); // more than one 255-byte character-string
    await publish({ name: '_probe.Zone-Test.example.com.', value: long });
    await publish({ name: '_probe.zone-test.example.com', value: 'second' });
    await publish({ name: '_probe.zone-test.example.com', value: 'second' });
    const options = { resolverUrl: `${world.url}/dev/dns-query`, timeoutMs: 3000, devZoneCleartext: true };
    expect(await resolveTxt('_probe.zone-test.example.com', options)).toEqual([long, 'second']);
    expect(await resolveTxt('_nothing.zone-test.example.com', options)).toEqual([]);

    const query = dnsPacket.encode({ type: 'query', id: 7, flags: dnsPacket.RECURSION_DESIRED, questions: [{ type: 'TXT', class: 'IN', name: '_probe.zone-test.example.com' }] });
    const res = await fetch(`${world.url}/dev/dns-query?dns=${query.toString('base64url')}`, { headers: { accept: 'application/dns-message' } });
    expect(res.headers.get('content-type')).toBe('application/dns-message');
    const message = dnsPacket.decode(Buffer.from(await res.arrayBuffer()));
    expect(message).toMatchObject({ id: 7, type: 'response', rcode: 'NOERROR' });
    expect(message.answers).toHaveLength(2);

    const garbage = await fetch(`${world.url}/dev/dns-query`, { method: 'POST', headers: { 'content-type': 'application/dns-message' }, body: 'not dns' });
    expect(garbage.status).toBe(400);
    // Another media type is refused naming the one it reads, which the document gives as its body (found from outside:
    // "send the body as application/json", and no requestBody, so a generated client could send none).
    const plain = await fetch(`${world.url}/dev/dns-query`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' });
    expect([plain.status, (await plain.json()).detail]).toEqual([415, 'send the body as application/dns-message']);
    const documented = (await (await fetch(`${world.url}/openapi.json`)).json()).paths['/dev/dns-query'].post;
    expect(Object.keys(documented.requestBody.content)).toEqual(['application/dns-message']);
    expect(documented.requestBody.content['application/dns-message'].schema).toMatchObject({ type: 'string', format: 'binary' });
  });

  it('is reached without TLS only when the composition root marks it as the dev zone', async () => {
    const error = await resolveTxt('_probe.zone-test.example.com', { resolverUrl: `${world.url}/dev/dns-query`, timeoutMs: 3000 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ResolverError);
    expect((error as ResolverError).message).toContain('must be https');
  });

  it('is the resolver of another dev gateway over plain HTTP on loopback: ACG_DOH_RESOLVER_URL http is used as configured (found from outside: every verification failed as "unreachable")', async () => {
    const other = await startWorld({ env: { ACG_DOH_RESOLVER_URL: `${world.url}/dev/dns-query` } });
    try {
      expect(other.gw.services.doh).toMatchObject({ resolverUrl: `${world.url}/dev/dns-query`, cleartext: true });
      const otherOwner = await other.humanToken('zone-elsewhere@example.com');
      const { merchant, dnsRecord } = await registerMerchant(other, otherOwner);
      expect((await publish({ name: dnsRecord.name, value: dnsRecord.value })).status).toBe(200);
      const verified = await other.api('POST', `/v1/merchants/${merchant.id}/verify-domain`, { token: otherOwner, key: uniqueKey('verify') });
      expect(verified.status, JSON.stringify(verified.body)).toBe(200);
      expect(verified.body.verified).toBe(true);
    } finally {
      await other.close();
    }
  });

  it('publishes only with the operator credential, and refuses what is not a record', async () => {
    expect((await publish({ name: '_x.example.com', value: 'v' }, 'acg_op_wrong')).status).toBe(401);
    expect((await world.api('POST', '/dev/dns/records', { body: { name: '_x.example.com', value: 'v' } })).status).toBe(401);
    expect((await publish({ name: '_x.example.com', value: 'v' }, owner)).status).toBe(401);
    const badName = await publish({ name: 'bad name', value: 'v' });
    expect([badName.body.code, badName.body.errors]).toEqual(['invalid_input', [{ path: 'body/name', message: expect.stringContaining('"bad name" is not a DNS name') }]]);
    const longValue = await publish({ name: '_x.example.com', value: 'v'.repeat(5000) });
    expect([longValue.body.code, longValue.body.detail]).toEqual(['invalid_input', expect.stringMatching(/^body\/value /)]);
    expect((await publish({ merchantId: 'mer_x', name: '_x.example.com', value: 'v' })).body.code).toBe('invalid_input');
    expect((await publish({ name: '_x.example.com' })).body.code).toBe('invalid_input');
    expect((await publish({ merchantId: 'mer_missing' })).status).toBe(404);
  });

  it('keeps the generated operator credential readable by its owner only', () => {
    expect(statSync(path.join(dataDir, 'operator-token')).mode & 0o777).toBe(0o600);
  });
});

describe('dev mode with another resolver (ACG_DOH_RESOLVER_URL)', () => {
  it('refuses to publish in the dev zone, which verification would never read, and says where to publish instead', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-devzone-elsewhere-'));
    const gw = await startTestGateway({ env: { ACG_DATA_DIR: dataDir, ACG_DOH_RESOLVER_URL: 'https://resolver.example.net/dns-query' } });
    try {
      const operator = readFileSync(path.join(dataDir, 'operator-token'), 'utf8').trim();
      const res = await fetch(`${gw.url}/dev/dns/records`, {
        method: 'POST',
        headers: { authorization: `Bearer ${operator}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: '_acceptor-verify.shop.example.com', value: 'v' }),
      });
      expect(res.status).toBe(409);
      const problem = (await res.json()) as { code: string; detail: string };
      expect(problem.code).toBe('conflict');
      expect(problem.detail).toContain('https://resolver.example.net/dns-query');
      expect(problem.detail).toContain('ACG_DOH_RESOLVER_URL');
    } finally {
      await gw.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('live mode has no dev zone', () => {
  const token = 'acg_op_live-test-credential';
  let live: TestGateway;

  beforeAll(async () => {
    live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com', ACG_OPERATOR_TOKEN_SHA256: sha256Hex(token) } });
  });
  afterAll(async () => {
    await live?.close();
  });

  it('answers 404 on the dev zone routes', async () => {
    const query = dnsPacket.encode({ type: 'query', id: 0, questions: [{ type: 'TXT', class: 'IN', name: 'example.com' }] });
    const get = await fetch(`${live.url}/dev/dns-query?dns=${query.toString('base64url')}`);
    const post = await fetch(`${live.url}/dev/dns-query`, { method: 'POST', headers: { 'content-type': 'application/dns-message' }, body: new Uint8Array(query) });
    const records = await fetch(`${live.url}/dev/dns/records`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: '_x.example.com', value: 'v' }),
    });
    expect([get.status, post.status, records.status]).toEqual([404, 404, 404]);
    expect(live.config.doh).toMatchObject({ devZone: false, resolverUrl: 'https://cloudflare-dns.com/dns-query' });
  });

  it('refuses a resolver URL that points at a dev zone, at start-up', async () => {
    const env = { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com', ACG_DOH_RESOLVER_URL: 'https://gateway.example.com/dev/dns-query/' };
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(/points at a gateway's dev routes/);
    const started = await run(process.execPath, [path.resolve('bin/acg.js'), 'serve'], { env: { ...process.env, ...env, PORT: '0' } }).catch((e: { code: number; stderr: string }) => e);
    expect(started).toMatchObject({ code: 2 });
    expect((started as { stderr: string }).stderr).toContain("ACG_DOH_RESOLVER_URL points at a gateway's dev routes");
    // Spelled as a router still reads it: percent-encoded, doubled slashes, another case, another dev route.
    for (const spelling of ['/dev/%64ns-query', '/%64ev/dns-query', '//dev/dns-query', '/DEV/dns-query', '/dev%2Fdns-query', '/dev/records', '/dev/%zz']) {
      expect(() => loadConfig({ ...env, ACG_DOH_RESOLVER_URL: `https://gateway.example.com${spelling}` }), spelling).toThrow(/points at a gateway's dev routes/);
    }
    expect(loadConfig({ ...env, ACG_DOH_RESOLVER_URL: 'https://dns.example/device/dns-query' }).doh.resolverUrl).toBe('https://dns.example/device/dns-query');
  });

  it('accepts on operator routes only the credential whose hash is configured', async () => {
    const grant = (authorization?: string) =>
      fetch(`${live.url}/v1/operator/credit-grants`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': uniqueKey('grant'), ...(authorization ? { authorization } : {}) },
        body: JSON.stringify({ agentId: 'agt_missing', amountUc: '1000000' }),
      }).then(async (res) => ({ status: res.status, body: (await res.json()) as { code: string } }));
    expect((await grant()).status).toBe(401);
    expect((await grant('Bearer acg_op_guess')).status).toBe(401);
    expect(await grant(`Bearer ${token}`)).toMatchObject({ status: 404, body: { code: 'not_found' } });
  });

  it('without a configured credential refuses every operator call: live mode generates none', () => {
    expect(acceptedOperatorHash({ mode: 'live', dataDir: tmpdir(), operatorTokenSha256: undefined })).toBeUndefined();
    expect(() => checkOperator(`Bearer ${token}`, undefined)).toThrow(expect.objectContaining({ code: 'unauthorized', status: 401 }));
  });
});
