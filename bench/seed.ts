// The bench's world, written before the gateway starts (the embedded database admits one process): one
// owner, one verified merchant with an API key and one offer, and N agents of the dev agent issuer, each
// funded by one grant through the ledger service (the path `acg credit grant` takes, so the lot, its journal
// and whatever the ledger keeps per agent are written as in production).
import { newApiKey } from '../src/identity/api-keys.ts';
import { AgentService } from '../src/agents/service.ts';
import type { Budget } from '../src/policy/mandate.ts';
import { devIssuerUrl, loadDevIssuerKeys, mintDevToken } from '../src/identity/dev-issuers.ts';
import { LedgerService } from '../src/ledger/service.ts';
import { loadConfig } from '../src/platform/config.ts';
import { createGateway, createLogger } from '../src/platform/gateway.ts';

export const PEPPER = 'bench-pepper-bench-pepper-bench-pepper-00';
export const PRICE_UC = 1_000_000n;
/** Enough for every mint a run can make on one agent: a million vouchers at PRICE_UC. */
const GRANT_UC = 1_000_000_000_000n;
const TOKEN_LIFETIME_S = 4 * 3600;
const OWNER_EMAIL = 'bench@example.com';
export const OFFER_ID = 'off_bench';
export const MERCHANT_ID = 'mer_bench';

export interface World {
  /** Bearer token of agent i+1 (agt_bench_<i+1>). */
  agentTokens: string[];
  /** Bearer tokens of the agents after those, whose mandates have all three budgets (the "3 budgets" cells'). */
  budgetedTokens: string[];
  /** Bearer tokens of the agents after those, with no budget, as new as the budgeted ones (the "0 budgets" cells'). */
  pairTokens: string[];
  merchantKey: string;
}

export const agentId = (n: number) => `agt_bench_${n}`;

/**
 * The whole configuration of the gateway under test (the seed opens its database with the same one); it
 * starts from an empty environment, so nothing in the caller's shell changes what is measured.
 */
export function gatewayEnv(options: { databaseUrl?: string; dataDir: string; port: number; githubUrl?: string }): Record<string, string> {
  return {
    ...(options.githubUrl ? { ACG_GITHUB_API_URL: options.githubUrl } : {}),
    ACG_MODE: 'dev',
    ACG_BASE_URL: `http://127.0.0.1:${options.port}`,
    ...(options.databaseUrl ? { DATABASE_URL: options.databaseUrl } : {}),
    ACG_DATA_DIR: options.dataDir,
    ACG_API_KEY_PEPPER: PEPPER,
    ACG_RATE_LIMIT_PER_ADDRESS: '10000000',
    ACG_RATE_LIMIT_PER_PRINCIPAL: '10000000',
    LOG_LEVEL: 'warn',
    PORT: String(options.port),
    HOST: '127.0.0.1',
  };
}

/** The budgets BENCH_BUDGETS takes from, in order: generous enough that no run reaches one. */
const BENCH_BUDGETS: Budget[] = [
  { id: 'daily', limitUc: String(GRANT_UC), period: 'day' },
  { id: 'bench-merchant', limitUc: String(GRANT_UC), period: 'month', merchantId: MERCHANT_ID },
  { id: 'books', limitUc: String(GRANT_UC), period: 'total', category: 'books' },
];

/**
 * `agents` agents with `budgets` budgets each, then `budgetedAgents` more (agt_bench_<agents+1>…) with all
 * three, then `pairAgents` more with none: the budgets pair (bench/run.ts) runs on agents of its own, both
 * sides as new to the gateway as each other, beside the workload's agents in the same run.
 */
export async function seed(env: Record<string, string>, agents: number, budgets = 0, budgetedAgents = 0, pairAgents = 0): Promise<World> {
  const total = agents + budgetedAgents + pairAgents;
  const config = loadConfig({ ...env });
  const gateway = await createGateway(config, { log: createLogger({ logLevel: 'warn' }) });
  const nowS = Math.floor(Date.now() / 1000);
  const merchantKey = newApiKey(PEPPER);
  try {
    const { db } = gateway;
    await db.query(`INSERT INTO owners (id, human_issuer, human_subject, email, email_verified, created_at_s, updated_at_s)
      VALUES ('own_bench', $1, 'bench-owner', $2, true, $3, $3)`, [devIssuerUrl(config.baseUrl, 'human'), OWNER_EMAIL, nowS]);
    await db.query(`INSERT INTO merchants (id, owner_id, name, domain, categories, verification_challenge, verified, accepted_payment_methods, created_at_s, updated_at_s)
      VALUES ($1, 'own_bench', 'Bench', 'bench.example.com', '["books"]', 'x', true, '["credits"]', $2, $2)`, [MERCHANT_ID, nowS]);
    await db.query(`INSERT INTO merchant_api_keys (id, merchant_id, owner_id, name, scopes, secret_hash, created_at_s)
      VALUES ($1, $2, 'own_bench', 'bench', '["redemptions:capture","redemptions:release","offers:read","offers:write"]', $3, $4)`, [merchantKey.keyId, MERCHANT_ID, merchantKey.secretHash, nowS]);
    await db.query(`INSERT INTO offers (id, merchant_id, name, category, price_uc, active, hold_lifetime_s, created_at_s, updated_at_s)
      VALUES ($1, $2, 'Bench', 'books', $3, true, 3600, $4, $4)`, [OFFER_ID, MERCHANT_ID, PRICE_UC, nowS]);
    await db.query(`INSERT INTO agents (id, owner_id, name, identity_issuer, identity_subject, status, allowed_services, allowed_categories, inbox_allowlist,
        cap_period_s, profile_name, profile_preset, profile_color, created_at_s, updated_at_s)
      SELECT 'agt_bench_' || i, 'own_bench', 'bench-agent-' || i, $1, 'bench-agent-' || i, 'active', '["*"]', '["*"]', '[]', 86400,
        'bench-agent-' || i, 'letter', '#4f46e5', $2, $2
      FROM generate_series(1, $3::int) AS i`, [devIssuerUrl(config.baseUrl, 'agent'), nowS, total]);
    const agentService = new AgentService(gateway, () => undefined);
    const ledger = new LedgerService(gateway, agentService);
    for (let n = 1; n <= total; n++) {
      await gateway.db.transaction((tx) => ledger.grant(tx, { agentId: agentId(n), amountUc: GRANT_UC, priority: 100, expiresAtS: null, source: 'grant', sourceRef: 'bench' }));
    }
    // Every agent gets its mandate version 1 (as the gateway's start would), and then its budgets.
    await agentService.writeMissingMandates();
    const owner = { kind: 'owner', id: 'own_bench', ownerId: 'own_bench', scopes: [], credential: 'bench' } as const;
    for (let n = 1; n <= total; n++) {
      const count = n <= agents ? budgets : n <= agents + budgetedAgents ? BENCH_BUDGETS.length : 0;
      if (count === 0) continue;
      await gateway.db.transaction(async (tx) => {
        const row = await agentService.lockAgentFor(tx, owner, agentId(n));
        await agentService.setMandate(tx, owner, agentId(n), { ...agentService.rulesOf(row), budgets: BENCH_BUDGETS.slice(0, count) });
      });
    }
    // Each agent's lot is renamed lot_bench_<n> (with its journal), so the replayed gateway SQL can name an
    // agent's lot from the agent's number alone (gateway-sql.ts). A table that references lots would refuse.
    await gateway.db.transaction(async (tx) => {
      const renamed = `SELECT id, 'lot_bench_' || substr(agent_id, 11) AS new_id FROM credit_lots WHERE agent_id LIKE 'agt\\_bench\\_%'`;
      await tx.query(`UPDATE journal_entries j SET operation_id = l.new_id FROM (${renamed}) l WHERE j.operation_id = l.id`);
      await tx.query(`UPDATE journal_entries j SET account = 'lot:' || l.new_id FROM (${renamed}) l WHERE j.account = 'lot:' || l.id`);
      await tx.query(`UPDATE credit_lots c SET id = l.new_id FROM (${renamed}) l WHERE c.id = l.id`);
    });
  } finally {
    await gateway.close();
  }
  const keys = await loadDevIssuerKeys(config.dataDir);
  const agentTokens: string[] = [];
  for (let n = 1; n <= total; n++) {
    agentTokens.push(
      await mintDevToken(keys, {
        baseUrl: config.baseUrl,
        audience: 'agent-credit-gateway',
        kind: 'agent',
        subject: `bench-agent-${n}`,
        ownerEmail: OWNER_EMAIL,
        ownerEmailClaim: config.agentOwnerEmailClaim,
        nowS,
        lifetimeS: TOKEN_LIFETIME_S,
      }),
    );
  }
  return {
    agentTokens: agentTokens.slice(0, agents),
    budgetedTokens: agentTokens.slice(agents, agents + budgetedAgents),
    pairTokens: agentTokens.slice(agents + budgetedAgents),
    merchantKey: merchantKey.plaintext,
  };
}
