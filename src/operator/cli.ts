// `acg credit grant`: the operator's way to fund an agent, through the ledger service like everything
// else. With a gateway running at ACG_BASE_URL (on the embedded database, the only process that may open
// it) the grant goes through its operator route. With none, the command opens the configured database
// itself, and only one that exists: run from the wrong directory, a command aimed at a gateway must say
// so, not create an empty ./.acg-data and then refuse the agent as unknown. What opening the database
// takes (the gateway's context, a database driver, the agent service) is loaded only then.
import { existsSync } from 'node:fs';
import { GRANT_NOTE_CHARS_MAX, GRANT_PRIORITY_MAX, LedgerService, type Lot } from '../ledger/service.ts';
import type { Config } from '../platform/config.ts';
import { embeddedDatabaseDir } from '../platform/db/open.ts';
import { cannotOpenDatabase } from '../platform/db/faults.ts';
import { DatabaseInUseError } from '../platform/db/database.ts';
import { ApiError } from '../platform/errors.ts';
import { IDEMPOTENCY_KEY_PATTERN } from '../platform/idempotency.ts';
import { formatUc, parseUc, UC_DIGITS_MAX, UC_PER_CREDIT } from '../platform/money.ts';
import type { Gateway } from '../platform/gateway.ts';
import { callGateway, describeRefusal, GatewayNotRunning, gatewayAnswers, missingCredential, NoAnswer, operatorCredentialFor } from './client.ts';

function fail(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

export interface GrantOptions {
  agent: string;
  amountUc: string;
  expiresAt?: string;
  priority: string;
  note?: string;
  idempotencyKey?: string;
}

interface Grant {
  agentId: string;
  amountUc: bigint;
  expiresAtS: number | null;
  priority: number;
  note: string;
  /** The operator's own key, for a retry of a grant whose answer was lost; otherwise one is drawn. */
  idempotencyKey?: string;
}

/** The same rules as the operator route's schema, said in the command's own terms. */
function validate(options: GrantOptions): Grant {
  let amountUc = 0n;
  try {
    amountUc = parseUc(options.amountUc);
  } catch {
    fail(`--amount-uc must be a whole number of microcredits of at most ${UC_DIGITS_MAX} digits, e.g. 5000000 for 5 credits`);
  }
  if (amountUc <= 0n) fail('--amount-uc must be positive');
  const expiresAtS = options.expiresAt === undefined ? null : Number(options.expiresAt);
  if (expiresAtS !== null && (!/^[0-9]+$/.test(options.expiresAt!) || !Number.isSafeInteger(expiresAtS))) fail('--expires-at must be Unix seconds');
  const priority = Number(options.priority);
  if (!/^[0-9]+$/.test(options.priority) || priority > GRANT_PRIORITY_MAX) fail(`--priority must be a whole number 0–${GRANT_PRIORITY_MAX}`);
  const note = options.note ?? 'operator grant';
  if (note.length < 1 || note.length > GRANT_NOTE_CHARS_MAX) fail(`--note must be 1–${GRANT_NOTE_CHARS_MAX} characters`);
  const key = options.idempotencyKey;
  if (key !== undefined && !IDEMPOTENCY_KEY_PATTERN.test(key)) fail('--idempotency-key must be 1–200 characters of A–Z, a–z, 0–9 and . _ : -');
  return { agentId: options.agent, amountUc, expiresAtS, priority, note, ...(key === undefined ? {} : { idempotencyKey: key }) };
}

/** Less than one credit is a legal grant, and most likely a unit mistake (`--amount-uc 5` meaning 5 credits): said, then granted. */
function warnIfBelowOneCredit(amountUc: bigint): void {
  if (amountUc >= UC_PER_CREDIT) return;
  process.stderr.write(
    `warning: --amount-uc ${amountUc} is ${amountUc} µc, less than one credit (1 credit = 1,000,000 µc); granting it as given. ` +
      `For ${amountUc} ${amountUc === 1n ? 'credit' : 'credits'}, give --amount-uc ${amountUc * UC_PER_CREDIT}\n`,
  );
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
    const headers: Record<string, string> = grant.idempotencyKey === undefined ? {} : { 'idempotency-key': grant.idempotencyKey };
    const answer = await callGateway(config.baseUrl, token, 'POST', '/v1/operator/credit-grants', body, headers);
    if (answer.status !== 201) fail(describeRefusal(config, answer));
    report(answer.body.lot as Lot, `through the gateway at ${config.baseUrl}${answer.replayed ? ', the first answer to this --idempotency-key (nothing granted again)' : ''}`);
    return true;
  } catch (error) {
    if (error instanceof GatewayNotRunning) return false;
    if (error instanceof NoAnswer) {
      fail(
        `${error.message}; its Idempotency-Key was ${error.idempotencyKey}. Look at the agent's lots (GET /v1/owner/agents/${grant.agentId}/lots) ` +
          `before granting again, or run the same command with --idempotency-key ${error.idempotencyKey}: the gateway then grants it at most once.`,
      );
    }
    fail((error as Error).message);
  }
}

/**
 * The ledger, built on a gateway context the command opened itself: the one place this command
 * constructs services (the composition root builds them for `acg serve`).
 */
async function ledgerFor(gateway: Gateway): Promise<LedgerService> {
  const { AgentService } = await import('../agents/service.ts');
  return new LedgerService(gateway, new AgentService(gateway, () => undefined));
}

async function grantInDatabase(config: Config, grant: Grant): Promise<void> {
  const { createGateway, createLogger } = await import('../platform/gateway.ts');
  let gateway;
  try {
    // Errors only, on stderr: stdout is the command's answer, and the gateway's warnings speak of a server (an outage
    // line saying requests answer 503, on stdout, beside the command's own one-line refusal; found from outside).
    gateway = await createGateway(config, { log: createLogger({ logLevel: 'error' }, process.stderr) });
  } catch (error) {
    // Nothing answered at the base URL, yet a gateway holds the database: it serves somewhere else.
    if (error instanceof DatabaseInUseError) {
      fail(
        `no gateway answers at ${config.baseUrl}, yet ${error.message.replace(/; stop it first.*$/, '')}: a gateway serves on another address. ` +
          'Set ACG_BASE_URL (or PORT) to it and run this again, e.g. PORT=9090 npx acg credit grant …',
      );
    }
    fail(cannotOpenDatabase(error));
  }
  try {
    const ledger = await ledgerFor(gateway);
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

export async function grantCredit(config: Config, options: GrantOptions): Promise<void> {
  const grant = validate(options);
  warnIfBelowOneCredit(grant.amountUc);
  const token = await operatorCredentialFor(config);
  if (token) {
    if (await grantThroughGateway(config, token, grant)) return;
  } else if (await gatewayAnswers(config.baseUrl).catch((error: Error) => fail(error.message))) {
    fail(await missingCredential(config));
  }
  // Nothing answers at the base URL. The key is the gateway's: a grant written straight to the database would not see
  // the one it may have applied, with or without the operator credential in this shell (found from outside: without
  // ACG_OPERATOR_TOKEN the key was ignored, and each run granted again).
  if (grant.idempotencyKey !== undefined) fail(`no gateway answers at ${config.baseUrl}: with --idempotency-key the grant goes through the gateway only; start it, then run this again`);
  // The database itself, if there is one to open.
  if (!config.databaseUrl && !existsSync(embeddedDatabaseDir(config.dataDir))) {
    fail(
      `no gateway answers at ${config.baseUrl}, and there is no database in ${config.dataDir}: start the gateway (npm start) and run this again ` +
        "in its directory, or set ACG_BASE_URL (or PORT) to where it runs and ACG_DATA_DIR to its data directory (DATABASE_URL to its database on PostgreSQL)",
    );
  }
  await grantInDatabase(config, grant);
}
