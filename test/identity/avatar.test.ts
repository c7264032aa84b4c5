import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startWorld, type World } from '../support/world.ts';

let world: World;
let agent: { id: string; token: string; ownerToken: string };
beforeAll(async () => {
  world = await startWorld();
  agent = await world.createAgent('pia@example.com', 'pias');
});
afterAll(() => world.close());

const PNG = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), Buffer.from('IHDR-fake-image-body')]);

async function putBytes(uploadUrl: string, bytes: Buffer, contentType: string, token = agent.ownerToken) {
  const res = await fetch(`${world.url}${uploadUrl}`, { method: 'PUT', headers: { authorization: `Bearer ${token}`, "content-type": contentType }, body: new Uint8Array(bytes) });
  return { status: res.status, body: res.status === 204 ? undefined : await res.json() };
}

async function start(contentType = 'image/png', sizeBytes = PNG.length) {
  const res = await world.api('POST', `/v1/owner/agents/${agent.id}/avatar/uploads`, { token: agent.ownerToken, body: { contentType, sizeBytes } });
  expect(res.status).toBe(201);
  return res.body;
}

async function storedUploads(): Promise<number> {
  const { rows } = await world.gw.gateway.db.query<{ n: bigint }>('SELECT count(*) AS n FROM avatar_uploads WHERE bytes IS NOT NULL');
  return Number(rows[0]!.n);
}

describe('agent profile and avatar', () => {
  it('sets the profile and normalises the colour', async () => {
    const res = await world.api('PUT', `/v1/owner/agents/${agent.id}/profile`, { token: agent.ownerToken, body: { name: 'Pia', preset: 'robot', color: '#AABBCC' } });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ name: 'Pia', preset: 'robot', color: '#aabbcc', avatarUrl: null });
    for (const bad of [{ name: 'Pia', preset: 'dragon', color: '#aabbcc' }, { name: 'Pia', preset: 'robot', color: 'red' }, { name: 'Pia', preset: 'image', color: '#aabbcc' }]) {
      const refused = await world.api('PUT', `/v1/owner/agents/${agent.id}/profile`, { token: agent.ownerToken, body: bad });
      expect(refused.status, JSON.stringify(bad)).toBe(400);
    }
  });

  it('round-trips upload → finalize → profile → image', async () => {
    const ticket = await start();
    expect(ticket).toMatchObject({ method: 'PUT', contentType: 'image/png', maxBytes: PNG.length });
    expect((await putBytes(ticket.uploadUrl, PNG, 'image/png')).status).toBe(204);
    const finalized = await world.api('POST', `/v1/owner/agents/${agent.id}/avatar/finalize`, {
      token: agent.ownerToken,
      body: { uploadId: ticket.uploadId, storageId: ticket.storageId },
    });
    expect(finalized.status).toBe(200);
    expect(finalized.body).toMatchObject({ preset: 'image', avatarUrl: `/v1/owner/agents/${agent.id}/avatar` });
    const agentRead = await world.api('GET', `/v1/owner/agents/${agent.id}`, { token: agent.ownerToken });
    expect(agentRead.body.profile).toEqual(finalized.body);
    const image = await fetch(`${world.url}${finalized.body.avatarUrl}`, { headers: { authorization: `Bearer ${agent.ownerToken}` } });
    expect(image.headers.get('content-type')).toBe('image/png');
    expect(Buffer.from(await image.arrayBuffer()).equals(PNG)).toBe(true);
  });

  it('refuses wrong types and oversized bodies with a problem body and stores nothing', async () => {
    const before = await storedUploads();
    const ticket = await start();
    const wrongType = await putBytes(ticket.uploadUrl, PNG, 'image/gif');
    expect(wrongType.status).toBe(415);
    expect(wrongType.body.code).toBe('unsupported_media_type');
    const declaredJpeg = await putBytes(ticket.uploadUrl, PNG, 'image/jpeg');
    expect(declaredJpeg.status).toBe(415);
    const notAnImage = await putBytes(ticket.uploadUrl, Buffer.from('<svg onload=alert(1)>'), 'image/png');
    expect(notAnImage.status).toBe(400);
    expect(notAnImage.body.code).toBe('invalid_input');
    const overDeclared = await putBytes(ticket.uploadUrl, Buffer.concat([PNG, Buffer.alloc(10)]), 'image/png');
    expect(overDeclared.status).toBe(413);
    const overLimit = await putBytes(ticket.uploadUrl, Buffer.concat([PNG, Buffer.alloc(300_000)]), 'image/png');
    expect(overLimit.status).toBe(413);
    expect(overLimit.body.code).toBe('payload_too_large');
    expect(await storedUploads()).toBe(before);
    const tooBigStart = await world.api('POST', `/v1/owner/agents/${agent.id}/avatar/uploads`, { token: agent.ownerToken, body: { contentType: 'image/png', sizeBytes: 300_000 } });
    expect(tooBigStart.status).toBe(400);
    const svgStart = await world.api('POST', `/v1/owner/agents/${agent.id}/avatar/uploads`, { token: agent.ownerToken, body: { contentType: 'image/svg+xml', sizeBytes: 10 } });
    expect(svgStart.status).toBe(400);
  });

  it('finalize refuses unknown, mismatched or empty uploads', async () => {
    const ticket = await start();
    const pending = await world.api('POST', `/v1/owner/agents/${agent.id}/avatar/finalize`, { token: agent.ownerToken, body: { uploadId: ticket.uploadId, storageId: ticket.storageId } });
    expect(pending.status).toBe(400);
    expect(pending.body.code).toBe('invalid_input');
    const mismatched = await world.api('POST', `/v1/owner/agents/${agent.id}/avatar/finalize`, { token: agent.ownerToken, body: { uploadId: ticket.uploadId, storageId: 'sto_other' } });
    expect(mismatched.status).toBe(404);
    expect(mismatched.body.code).toBe('not_found');
    const missingField = await world.api('POST', `/v1/owner/agents/${agent.id}/avatar/finalize`, { token: agent.ownerToken, body: { uploadId: ticket.uploadId } });
    expect(missingField.status).toBe(400);
    const otherOwner = await world.humanToken('quinn@example.com');
    const foreign = await world.api('POST', `/v1/owner/agents/${agent.id}/avatar/finalize`, { token: otherOwner, body: { uploadId: ticket.uploadId, storageId: ticket.storageId } });
    expect(foreign.status).toBe(404);
  });
});
