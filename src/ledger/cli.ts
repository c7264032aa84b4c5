// `acg credit grant`: the operator's way to fund an agent, through the same service as everything else.
import { buildServices } from '../app.ts';
import type { Config } from '../platform/config.ts';
import { ApiError } from '../platform/errors.ts';
import { createGateway, createLogger } from '../platform/gateway.ts';
import { parseUc } from '../platform/money.ts';

function fail(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

export async function grantCredit(
  config: Config,
  options: { agent: string; amountUc: string; expiresAt?: string; priority: string; note?: string },
): Promise<void> {
  let amountUc: bigint;
  try {
    amountUc = parseUc(options.amountUc);
  } catch {
    fail('--amount-uc must be a whole number of microcredits, e.g. 5000000 for 5 credits');
  }
  if (amountUc <= 0n) fail('--amount-uc must be positive');
  const expiresAtS = options.expiresAt === undefined ? null : Number(options.expiresAt);
  if (expiresAtS !== null && !Number.isInteger(expiresAtS)) fail('--expires-at must be Unix seconds');
  const priority = Number(options.priority);
  if (!Number.isInteger(priority) || priority < 0 || priority > 1_000_000) fail('--priority must be a whole number 0–1000000');

  let gateway;
  try {
    gateway = await createGateway(config, { log: createLogger({ logLevel: 'warn' }) });
  } catch (error) {
    fail(`cannot open the database: ${(error as Error).message}`);
  }
  try {
    const { ledger } = await buildServices(gateway);
    const lot = await gateway.db.transaction((tx) =>
      ledger.grant(tx, { agentId: options.agent, amountUc, priority, expiresAtS, source: 'grant', sourceRef: options.note ?? 'operator grant' }),
    );
    process.stdout.write(`granted ${lot.grantedUc} µc to ${lot.agentId} as lot ${lot.id}${lot.expiresAt ? `, lapsing at ${lot.expiresAt}` : ''}\n`);
  } catch (error) {
    if (error instanceof ApiError) fail(`refused: ${error.message}`);
    throw error;
  } finally {
    await gateway.close();
  }
}
