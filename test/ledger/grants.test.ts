// The operator's grant (POST /v1/operator/credit-grants, LedgerService.grant): what its own rules refuse.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sha256Hex } from '../../src/operator/credential.ts';
import { startWorld, type World } from '../support/world.ts';

const OPERATOR = 'acg_op_grants-test-operator-credential';
let world: World;
let counter = 0;

beforeAll(async () => {
  world = await startWorld({ env: { ACG_OPERATOR_TOKEN_SHA256: sha256Hex(OPERATOR) } });
});
afterAll(() => world?.close());

describe('POST /v1/operator/credit-grants', () => {
  it('names the member a rule the schema cannot state refuses, as the schema does (body/…, in detail and errors): an amount of 0, an expiry not in the future', async () => {
    const agent = await world.createAgent('grants@example.com', 'grants-agent');
    const grant = (body: Record<string, unknown>) => world.api('POST', '/v1/operator/credit-grants', { token: OPERATOR, key: `grant-${++counter}`, body: { agentId: agent.id, ...body } });
    const named = (res: { status: number; body: Record<string, unknown> }) => [res.status, res.body.code, res.body.detail, res.body.errors];
    const refused = (path: string, message: string) => [400, 'invalid_input', `${path} ${message}`, [{ path, message }]];
    expect(named(await grant({ amountUc: '0' }))).toEqual(refused('body/amountUc', 'must be positive'));
    expect(named(await grant({ amountUc: '1000000', expiresAt: world.gw.clock.nowS() }))).toEqual(refused('body/expiresAt', 'must be in the future'));
    expect((await grant({ amountUc: '1000000', expiresAt: world.gw.clock.nowS() + 3600 })).status).toBe(201);
  });
});
