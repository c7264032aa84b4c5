import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';

let world: World;
beforeAll(async () => {
  world = await startWorld();
});
afterAll(() => world.close());

describe('owners and agents', () => {
  it('registers an agent with deny-nothing defaults and reads it back', async () => {
    const owner = await world.humanToken('ada@example.com');
    const created = await world.api('POST', '/v1/owner/agents', {
      token: owner,
      key: 'reg-1',
      body: { name: 'Scout', identity: { issuer: world.agentIssuer.issuer, subject: 'scout' }, caps: { perHoldUc: '5000000' } },
    });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({
      name: 'Scout',
      status: 'active',
      allowedServices: ['*'],
      allowedCategories: ['*'],
      inboxAllowlist: [],
      caps: { perHoldUc: '5000000', perPeriodUc: null, periodS: 86400 },
      profile: { name: 'Scout', preset: 'letter', color: '#4f46e5', avatarUrl: null },
    });
    const read = await world.api('GET', `/v1/owner/agents/${created.body.id}`, { token: owner });
    expect(read.body).toEqual(created.body);
    const replay = await world.api('POST', '/v1/owner/agents', {
      token: owner,
      key: 'reg-1',
      body: { name: 'Scout', identity: { issuer: world.agentIssuer.issuer, subject: 'scout' }, caps: { perHoldUc: '5000000' } },
    });
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body.id).toBe(created.body.id);
  });

  it('replays a registration as first answered, member for member in the same order', async () => {
    const owner = await world.humanToken('ada@example.com');
    const register = () =>
      world.api('POST', '/v1/owner/agents', { token: owner, key: 'register-order', body: { name: 'Order', identity: { issuer: world.agentIssuer.issuer, subject: 'order' } } });
    const first = await register();
    const replay = await register();
    expect([first.status, replay.status, replay.headers.get('idempotent-replayed')]).toEqual([201, 201, 'true']);
    expect(JSON.stringify(replay.body)).toBe(JSON.stringify(first.body));
    expect(replay.headers.get('content-type')).toBe(first.headers.get('content-type'));
  });

  it('requires an Idempotency-Key to register', async () => {
    const owner = await world.humanToken('ada@example.com');
    const res = await world.api('POST', '/v1/owner/agents', { token: owner, body: { name: 'x', identity: { issuer: world.agentIssuer.issuer, subject: 'x' } } });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('idempotency_required');
  });

  it('refuses an identity from an issuer other than the agent identity provider', async () => {
    const owner = await world.humanToken('ada@example.com');
    const res = await world.api('POST', '/v1/owner/agents', {
      token: owner,
      key: 'reg-wrong-issuer',
      body: { name: 'x', identity: { issuer: world.human.issuer, subject: 'x' } },
    });
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('invalid_input');
  });

  it("refuses an owner's second registration of the same identity with 409", async () => {
    const ada = await world.createAgent('ada@example.com', 'twice');
    const res = await world.api('POST', '/v1/owner/agents', {
      token: ada.ownerToken,
      key: 'reg-twice',
      body: { name: 'x', identity: { issuer: world.agentIssuer.issuer, subject: 'twice' } },
    });
    expect(res.status).toBe(409);
    expect(res.body.detail).toBe("an agent with this identity (issuer + subject) is registered already, among this owner's agents");
  });

  it("lets no owner take another owner's agent identity: each token reaches its own owner's registration (found from outside)", async () => {
    // Bob registers the subject Ada's agent uses before she does: it was Ada's 409, and her agent was refused everywhere.
    const bob = await world.humanToken('bob@example.com');
    const squat = await world.api('POST', '/v1/owner/agents', { token: bob, key: 'squat-1', body: { name: 'squat', identity: { issuer: world.agentIssuer.issuer, subject: 'ada-scout' } } });
    expect(squat.status).toBe(201);
    const ada = await world.createAgent('ada@example.com', 'ada-scout');
    expect(ada.id).not.toBe(squat.body.id);
    const me = await world.api('GET', '/v1/me', { token: ada.token });
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ kind: 'agent', agent: { id: ada.id } });
    // A token of that subject for Bob reaches Bob's registration, never Ada's; one for an owner who registered none is refused.
    const bobs = await world.api('GET', '/v1/me', { token: await world.agentToken('ada-scout', 'bob@example.com') });
    expect(bobs.body).toMatchObject({ kind: 'agent', agent: { id: squat.body.id } });
    const stranger = await world.api('GET', '/v1/me', { token: await world.agentToken('ada-scout', 'eve@example.com') });
    expect(stranger.status).toBe(403);
    expect(stranger.body.code).toBe('owner_claim_required');
    const unknown = await world.api('GET', '/v1/me', { token: await world.agentToken('nobody-registered-this', 'ada@example.com') });
    expect(unknown.body.code).toBe('agent_not_registered');
  });

  it('refuses unknown services and malformed caps', async () => {
    const owner = await world.humanToken('ada@example.com');
    for (const body of [
      { name: 'x', identity: { issuer: world.agentIssuer.issuer, subject: 'y1' }, allowedServices: ['teleport'] },
      { name: 'x', identity: { issuer: world.agentIssuer.issuer, subject: 'y2' }, caps: { perHoldUc: '1.5' } },
      { name: 'x', identity: { issuer: world.agentIssuer.issuer, subject: 'y3' }, caps: { perHoldUc: 10 } },
      { name: '', identity: { issuer: world.agentIssuer.issuer, subject: 'y4' } },
    ]) {
      const res = await world.api('POST', '/v1/owner/agents', { token: owner, key: `bad-${body.identity.subject}`, body });
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect(res.body.code).toBe('invalid_input');
    }
  });

  it("hides another owner's agents (404) and lists only your own", async () => {
    const mine = await world.createAgent('carol@example.com', 'carols');
    const dave = await world.humanToken('dave@example.com');
    expect((await world.api('GET', `/v1/owner/agents/${mine.id}`, { token: dave })).status).toBe(404);
    expect((await world.api('PATCH', `/v1/owner/agents/${mine.id}`, { token: dave, body: { name: 'stolen' } })).status).toBe(404);
    expect((await world.api('POST', `/v1/owner/agents/${mine.id}/freeze`, { token: dave })).status).toBe(404);
    const list = await world.api('GET', '/v1/owner/agents', { token: dave });
    expect(list.body.agents).toEqual([]);
  });

  it('pages through agents oldest first', async () => {
    for (const n of [1, 2, 3]) await world.createAgent('pager@example.com', `pager-${n}`);
    const owner = await world.humanToken('pager@example.com');
    const first = await world.api('GET', '/v1/owner/agents?limit=2', { token: owner });
    expect(first.body.agents).toHaveLength(2);
    expect(first.body.hasMore).toBe(true);
    const second = await world.api('GET', `/v1/owner/agents?limit=2&startingAfter=${first.body.agents[1].id}`, { token: owner });
    expect(second.body.agents.map((a: { name: string }) => a.name)).toEqual(['pager-3']);
    expect(second.body.hasMore).toBe(false);
  });

  it('updates allowances and caps, and freezes and unfreezes', async () => {
    const agent = await world.createAgent('erin@example.com', 'erins');
    const patched = await world.api('PATCH', `/v1/owner/agents/${agent.id}`, {
      token: agent.ownerToken,
      body: { allowedServices: ['mail'], inboxAllowlist: ['INBOX', 'Receipts'], caps: { perPeriodUc: '9000000', periodS: 3600 } },
    });
    expect(patched.status).toBe(200);
    expect(patched.body).toMatchObject({ allowedServices: ['mail'], inboxAllowlist: ['INBOX', 'Receipts'], caps: { perPeriodUc: '9000000', periodS: 3600 } });
    const frozen = await world.api('POST', `/v1/owner/agents/${agent.id}/freeze`, { token: agent.ownerToken });
    expect(frozen.body.status).toBe('frozen');
    const me = await world.api('GET', '/v1/me', { token: agent.token });
    expect(me.body.agent.status).toBe('frozen');
    const thawed = await world.api('POST', `/v1/owner/agents/${agent.id}/unfreeze`, { token: agent.ownerToken });
    expect(thawed.body.status).toBe('active');
  });

  it("binds an agent to its owner's verified email", async () => {
    const agent = await world.createAgent('frank@example.com', 'franks');
    expect((await world.api('GET', '/v1/me', { token: agent.token })).status).toBe(200);
    const mismatched = await world.agentToken('franks', 'mallory@example.com');
    const res = await world.api('GET', '/v1/me', { token: mismatched });
    expect(res.status).toBe(403);
    expect(res.body.code).toBe('owner_claim_required');
    // The owner's email changes at the human provider: old agent tokens carrying the old email stop working.
    await world.api('GET', '/v1/me', { token: await world.humanToken('frank.new@example.com', { subject: 'human-frank@example.com' }) });
    expect((await world.api('GET', '/v1/me', { token: agent.token })).status).toBe(403);
  });

  it("keeps the owner's email that the newest session gave: an older session still valid carries the old one and is refused", async () => {
    const subject = 'human-lena@example.com';
    const nowS = Math.floor(Date.now() / 1000);
    const older = await world.human.mint({ sub: subject, email: 'lena@example.com', email_verified: true }, { issuedAtS: nowS - 60 });
    const newer = await world.human.mint({ sub: subject, email: 'lena.new@example.com', email_verified: true }, { issuedAtS: nowS - 30 });
    expect((await world.api('GET', '/v1/me', { token: older })).body.owner.email).toBe('lena@example.com');
    const agent = await world.createAgent('lena@example.com', 'lenas');
    expect((await world.api('GET', '/v1/me', { token: newer })).body.owner.email).toBe('lena.new@example.com');
    const stale = await world.api('GET', '/v1/me', { token: older });
    expect(stale.status).toBe(403);
    expect(stale.body.code).toBe('owner_claim_required');
    // The binding stays on the new email: the agent identity carrying the old one is still refused.
    expect((await world.api('GET', '/v1/me', { token: newer })).body.owner.email).toBe('lena.new@example.com');
    expect((await world.api('GET', '/v1/me', { token: agent.token })).status).toBe(403);
    expect((await world.api('GET', '/v1/me', { token: await world.agentToken('lenas', 'lena.new@example.com') })).status).toBe(200);
    // A later session may give the old email back (the person changed it back at the provider).
    const later = await world.human.mint({ sub: subject, email: 'lena@example.com', email_verified: true }, { issuedAtS: nowS });
    expect((await world.api('GET', '/v1/me', { token: later })).body.owner.email).toBe('lena@example.com');
    expect((await world.api('GET', '/v1/me', { token: agent.token })).status).toBe(200);
  });

  it("stops the owner's controls and its agents when a newer session says the email is not verified, until one says it is", async () => {
    const subject = 'human-mira@example.com';
    const nowS = Math.floor(Date.now() / 1000);
    const session = (verified: boolean, issuedAtS: number) => world.human.mint({ sub: subject, email: 'mira@example.com', email_verified: verified }, { issuedAtS });
    const first = await session(true, nowS - 60);
    const ownerId = (await world.api('GET', '/v1/me', { token: first })).body.owner.id;
    const agent = await world.createAgent('mira@example.com', 'miras');
    const ownerOAuth = await world.accessToken({ sub: ownerId, scope: 'svc:owner', email: 'mira@example.com' });
    const agentOAuth = await world.accessToken({ sub: agent.id, scope: 'svc:agent' });
    const statuses = async () => Promise.all([first, ownerOAuth, agent.token, agentOAuth].map(async (token) => (await world.api('GET', '/v1/me', { token })).status));
    expect(await statuses()).toEqual([200, 200, 200, 200]);
    const unverified = await world.api('GET', '/v1/me', { token: await session(false, nowS - 30) });
    expect(unverified.status).toBe(403);
    expect(unverified.body.code).toBe('owner_claim_required');
    expect(await statuses()).toEqual([403, 403, 403, 403]);
    // A session saying verified, issued after it, gives them back.
    expect((await world.api('GET', '/v1/me', { token: await session(true, nowS) })).status).toBe(200);
    // The first session too: the email it carries is the one in force, verified again.
    expect(await statuses()).toEqual([200, 200, 200, 200]);
  });

  it('rechecks the verified human behind an owner OAuth token', async () => {
    const human = await world.humanToken('gina@example.com');
    const ownerId = (await world.api('GET', '/v1/me', { token: human })).body.owner.id;
    const token = await world.accessToken({ sub: ownerId, scope: 'svc:owner', email: 'gina@example.com' });
    expect((await world.api('GET', '/v1/owner/agents', { token })).status).toBe(200);
    await world.api('GET', '/v1/me', { token: await world.humanToken('gina2@example.com', { subject: 'human-gina@example.com' }) });
    const after = await world.api('GET', '/v1/owner/agents', { token });
    expect(after.status).toBe(403);
    expect(after.body.code).toBe('owner_claim_required');
  });

  it('tells each principal who it is', async () => {
    const agent = await world.createAgent('hana@example.com', 'hanas');
    const human = await world.api('GET', '/v1/me', { token: agent.ownerToken });
    expect(human.body).toMatchObject({ kind: 'human', credential: 'human_session', owner: { email: 'hana@example.com' } });
    const asAgent = await world.api('GET', '/v1/me', { token: agent.token });
    expect(asAgent.body).toMatchObject({ kind: 'agent', credential: 'agent_identity', agent: { id: agent.id } });
    const oauth = await world.api('GET', '/v1/me', { token: await world.accessToken({ sub: agent.id, scope: 'svc:agent' }) });
    expect(oauth.body).toMatchObject({ kind: 'agent', credential: 'oauth' });
  });

  it('refetches the identity provider keys when a token names an unknown kid', async () => {
    const before = await world.humanToken('ivy@example.com');
    expect((await world.api('GET', '/v1/me', { token: before })).status).toBe(200);
    await world.human.rotate();
    const after = await world.humanToken('ivy@example.com');
    // A sleep, not a wait: jose refetches keys at most once per cooldown (1 s) on the real clock, and only
    // the passing of that time lets the unknown kid trigger a refetch.
    await new Promise((r) => setTimeout(r, 1100));
    const res = await world.api('GET', '/v1/me', { token: after });
    expect(res.status).toBe(200);
  });
});
