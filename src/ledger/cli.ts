// `acg credit grant`: the operator's way to fund an agent, through the ledger service like everything
// else. With a gateway running (the only process that may open the embedded database) the grant goes
// through its operator route; with none, the command opens the database itself (and only then loads
// what that takes: the gateway's context, a database driver, the agent service).
import { callGateway, describeProblem, GatewayNotRunning } from '../operator/client.ts';
import { presentedOperatorToken } from '../operator/credential.ts';
import type { Config } from '../platform/config.ts';
import { ApiError } from '../platform/errors.ts';
import { formatUc, parseUc } from '../platform/money.ts';
import { GRANT_NOTE_CHARS_MAX, GRANT_PRIORITY_MAX, LedgerService, type Lot } from './service.ts';

function fail(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

interface Grant {
  agentId: string;
  amountUc: bigint;
  expiresAtS: number | null;
  priority: number;
  note: string;
}

/** The same rules as the operator route's schema, said in the command's own terms. */
function validate(options: { agent: string; amountUc: string; expiresAt?: string; priority: string; note?: string }): Grant {
  let amountUc = 0n;
  try {
    amountUc = parseUc(options.amountUc);
  } catch {
    fail('--amount-uc must be a whole number of microcredits, e.g. 5000000 for 5 credits');
  }
  if (amountUc <= 0n) fail('--amount-uc must be positive');
  const expiresAtS = options.expiresAt === undefined ? null : Number(options.expiresAt);
  if (expiresAtS !== null && (!/^[0-9]+$/.test(options.expiresAt!) || !Number.isSafeInteger(expiresAtS))) fail('--expires-at must be Unix seconds');
  const priority = Number(options.priority);
  if (!/^[0-9]+$/.test(options.priority) || priority > GRANT_PRIORITY_MAX) fail(`--priority must be a whole number 0–${GRANT_PRIORITY_MAX}`);
  const note = options.note ?? 'operator grant';
  if (note.length < 1 || note.length > GRANT_NOTE_CHARS_MAX) fail(`--note must be 1–${GRANT_NOTE_CHARS_MAX} characters`);
  return { agentId: options.agent, amountUc, expiresAtS, priority, note };
}

function report(lot: Pick<Lot, 'grantedUc' | 'agentId' | 'id' | 'expiresAt'>, via: string): void {
  const lapsing = lot.expiresAt ? `, lapsing at ${new Date(lot.expiresAt * 1000).toISOString()}` : '';
  process.stdout.write(`granted ${lot.grantedUc} µc to ${lot.agentId} as lot ${lot.id}${lapsing} (${via})\n`);
}

/** Through the running gateway; false when none runs at the base URL. */
async function grantThroughGateway(config: Config, token: string, grant: Grant): Promise<boolean> {
  const body = {
    agentId: grant.agentId,
    amountUc: formatUc(grant.amountUc),
    priority: grant.priority,
    note: grant.note,
    ...(grant.expiresAtS === null ? {} : { expiresAt: grant.expiresAtS }),
  };
  try {
    const answer = await callGateway(config.baseUrl, token, 'POST', '/v1/operator/credit-grants', body);
    if (answer.status !== 201) fail(`refused: ${describeProblem(answer)}`);
    report(answer.body.lot as Lot, `through the gateway at ${config.baseUrl}`);
    return true;
  } catch (error) {
    if (error instanceof GatewayNotRunning) return false;
    fail((error as Error).message);
  }
}

async function grantInDatabase(config: Config, grant: Grant): Promise<void> {
  const { createGateway, createLogger } = await import('../platform/gateway.ts');
  const { AgentService } = await import('../agents/service.ts');
  let gateway;
  try {
    gateway = await createGateway(config, { log: createLogger({ logLevel: 'warn' }) });
  } catch (error) {
    fail(`cannot open the database: ${(error as Error).message}`);
  }
  try {
    const ledger = new LedgerService(gateway, new AgentService(gateway, () => undefined));
    const lot = await gateway.db.transaction((tx) =>
      ledger.grant(tx, { agentId: grant.agentId, amountUc: grant.amountUc, priority: grant.priority, expiresAtS: grant.expiresAtS, source: 'grant', sourceRef: grant.note }),
    );
    report(lot, gateway.db.kind === 'postgres' ? 'in PostgreSQL' : `in the embedded database in ${config.dataDir}`);
  } catch (error) {
    if (error instanceof ApiError) fail(`refused: ${error.message}`);
    throw error;
  } finally {
    await gateway.close();
  }
}

export async function grantCredit(
  config: Config,
  options: { agent: string; amountUc: string; expiresAt?: string; priority: string; note?: string },
): Promise<void> {
  const grant = validate(options);
  const token = presentedOperatorToken(config);
  if (token && (await grantThroughGateway(config, token, grant))) return;
  await grantInDatabase(config, grant);
}
