// `acg agent mandate show|set`: an owner's scripts read and replace an agent's mandate on a running gateway,
// through the owner routes every other client uses (GET and PUT /v1/owner/agents/{id}/mandate), and print
// the mandate as JSON. `acg agent delegates list|create` read an agent's subtree and register a delegate
// under a mandate within its parent's (GET /v1/owner/agents/{id}/delegates, POST /v1/agents/{id}/delegates). A mandate is its owner's to set, never the operator's, so these commands present an
// owner credential: ACG_OWNER_TOKEN (a human session JWT of the human identity provider, or an OAuth access
// token with scope svc:owner), or in dev mode, with the built-in dev issuer, a short session signed for
// --owner-email (what `acg dev token human` mints). Each refusal is one line a person can act on.
import { existsSync, readFileSync, statSync, type Stats } from 'node:fs';
import type { Config } from '../platform/config.ts';
import { callGateway, describeProblem, GatewayNotRunning, gatewayAnswers, gatewayMode, liveGatewayAt, NoAnswer, missingDevIssuerKeys, noGatewayAt, type GatewayAnswer } from './client.ts';

/** A dev session lives only as long as one command needs it. */
const DEV_SESSION_LIFETIME_S = 300;
/** Far above any mandate (20 budgets, 200 merchant names); the gateway's body limit applies after. */
const MANDATE_FILE_BYTES_MAX = 1_048_576;
/** What GET shows besides the rules: a file saved from `show` is taken by `set` without them. */
const READ_ONLY_MEMBERS = ['agentId', 'version', 'createdAt', 'hash', 'usage'] as const;

export interface MandateCommandOptions {
  agentId: string;
  /** ACG_OWNER_TOKEN, as the environment gives it. */
  ownerToken?: string;
  /** --owner-email: dev mode's sign-in through the built-in dev issuer. */
  ownerEmail?: string;
}

/** The owner credential a command presents, and where it came from (named in refusals). */
export interface OwnerCredential {
  token: string;
  source: string;
}

export function fail(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** The gateway's own rule for a dev issuer's email (DevLoginBody in src/oauth/schemas.ts): one @, no spaces, 3–254 characters. */
const EMAIL_PATTERN = /^[^@\s]+@[^@\s]+$/;

/**
 * Why `value`, given as `option`, is no email the gateway would take, or undefined. A dev token signed for "notanemail"
 * would be minted and then refused by the gateway as a 401: said here instead, before anything is signed.
 */
export function emailProblem(option: string, value: string): string | undefined {
  if (EMAIL_PATTERN.test(value) && value.length >= 3 && value.length <= 254) return undefined;
  return `${option} ${JSON.stringify(value)} is not an email address: give one like ada@example.com (one @, no spaces, at most 254 characters)`;
}

/** A gateway runs at the base URL, but no owner credential was given: how to give one here. */
function noOwnerCredential(config: Pick<Config, 'baseUrl' | 'mode' | 'humanIssuer'>): string {
  const devLogin = config.mode === 'dev' && !config.humanIssuer ? ', or give --owner-email <email> to sign in as that owner with the dev gateway\'s built-in issuer' : '';
  return (
    `a gateway answers at ${config.baseUrl}, but no owner credential was given: this command acts as the agent's owner. ` +
    `Set ACG_OWNER_TOKEN to the owner's session token (a human session JWT, or an OAuth access token with scope svc:owner)${devLogin}`
  );
}

/** Dev mode, built-in human issuer: a short session of the owner `email`, signed with the dev gateway's keys. */
async function devSession(config: Config, email: string): Promise<OwnerCredential> {
  if (config.mode !== 'dev') fail('--owner-email signs in with the built-in dev issuer, which only dev mode has: set ACG_OWNER_TOKEN to a session token of the owner');
  if (config.humanIssuer) {
    fail(`a human identity issuer is configured (ACG_HUMAN_ISSUER), so --owner-email cannot sign in: set ACG_OWNER_TOKEN to the owner's session token from ${config.humanIssuer.issuer}`);
  }
  const malformed = emailProblem('--owner-email', email);
  if (malformed) fail(malformed);
  // A live gateway trusts no dev session: said as what it is, before a session is signed and sent (found from outside:
  // its 401 was said as an expired session).
  if ((await gatewayMode(config.baseUrl)) === 'live') {
    fail(liveGatewayAt(config.baseUrl, "--owner-email works in dev mode only (it signs a session with the dev gateway's built-in issuer): set ACG_OWNER_TOKEN to the owner's session token"));
  }
  const { devIssuerKeysFile, loadDevIssuerKeys, mintDevToken } = await import('../identity/dev-issuers.ts');
  const file = devIssuerKeysFile(config.dataDir);
  if (!existsSync(file)) fail(await missingDevIssuerKeys(config, file));
  const owner = email.toLowerCase();
  const token = await mintDevToken(await loadDevIssuerKeys(config.dataDir), {
    baseUrl: config.baseUrl,
    audience: 'agent-credit-gateway',
    kind: 'human',
    subject: `human:${owner}`,
    email: owner,
    ownerEmailClaim: config.agentOwnerEmailClaim,
    lifetimeS: DEV_SESSION_LIFETIME_S,
    nowS: Math.floor(Date.now() / 1000),
  });
  return { token, source: `--owner-email ${owner} (a dev session)` };
}

/** The option given on the command line wins over the environment (clig.dev): --owner-email over ACG_OWNER_TOKEN. */
export async function ownerCredential(config: Config, options: Pick<MandateCommandOptions, 'ownerToken' | 'ownerEmail'>): Promise<OwnerCredential> {
  if (options.ownerEmail !== undefined) return devSession(config, options.ownerEmail);
  if (options.ownerToken) return { token: options.ownerToken, source: 'ACG_OWNER_TOKEN' };
  const running = await gatewayAnswers(config.baseUrl).catch((error: Error) => fail(error.message));
  fail(running ? noOwnerCredential(config) : noGatewayAt(config));
}

/**
 * One request to the gateway about one agent; no gateway, or no answer, is said and ends the command. A success that
 * does not name the agent is not the gateway's (every answer of these routes names it: the mandate's `agentId`, the
 * agent's `id`, a delegate's ancestors): another server at the address, whose 200 a script would have taken for a
 * change made (found from outside: a catch-all server's `{"hello": …}` printed, exit 0).
 */
export async function call(
  config: Config,
  credential: OwnerCredential,
  method: 'GET' | 'POST' | 'PUT',
  path: string,
  body?: unknown,
  headers?: Record<string, string>,
): Promise<GatewayAnswer> {
  try {
    const answer = await callGateway(config.baseUrl, credential.token, method, path, body, headers);
    const agentId = decodeURIComponent(path.split('/').find((segment) => segment.startsWith('agt_')) ?? '');
    if (answer.status < 300 && agentId !== '' && !JSON.stringify(answer.body).includes(agentId)) {
      fail(`${config.baseUrl} answered ${method} ${path} with HTTP ${answer.status} and a body that does not name the agent: is the gateway at ${config.baseUrl}? Set ACG_BASE_URL (or PORT) to where it runs`);
    }
    return answer;
  } catch (error) {
    if (error instanceof GatewayNotRunning) fail(noGatewayAt(config));
    // These commands take no key of their own: running one again is safe (a mandate set as it stands writes no
    // version, a frozen agent stays frozen, a second delegate of the subject is refused), but it should be looked at.
    if (error instanceof NoAnswer) fail(`${error.message}: read the agent's state before running the command again`);
    fail((error as Error).message);
  }
}

/** Each schema violation as the member of the file it names (`/budgets/0/limitUc`), or the gateway's own detail. */
function violations(answer: GatewayAnswer): string[] {
  const errors = (answer.body as { errors?: Array<{ path: string; message: string }> }).errors;
  if (!errors?.length) return [String((answer.body as { detail?: string }).detail ?? answer.body.title ?? 'the mandate is not valid')];
  return errors.map((error) => `${error.path.replace(/^body(?=\/|$)/, '') || '/'}: ${error.message}`);
}

/** Why the gateway refused, said in the command's terms. */
function refusal(config: Config, credential: OwnerCredential, options: MandateCommandOptions, answer: GatewayAnswer, file?: string): string {
  const problem = describeProblem(answer);
  if (answer.status === 401) {
    // An OAuth token of this gateway for another resource (its /mcp endpoint) is refused by its audience.
    if (/"aud"/.test(String((answer.body as { detail?: string }).detail ?? ''))) {
      return (
        `the gateway at ${config.baseUrl} does not accept the owner credential from ${credential.source} (${problem}): it was issued for another ` +
        `resource (a token for ${config.baseUrl}/mcp serves MCP only); ask for one whose resource is ${config.baseUrl}`
      );
    }
    return `the gateway at ${config.baseUrl} does not accept the owner credential from ${credential.source} (${problem}): it has expired, or is not a session of this gateway's human identity provider`;
  }
  if (answer.status === 403) {
    return `the credential from ${credential.source} is not an owner's (${problem}): a mandate is read and set with its owner's session, not an agent's or a merchant's credential`;
  }
  if (answer.status === 404) {
    return `no agent ${options.agentId} among the agents of the owner of ${credential.source} (${problem}): check the agent id, and that the credential is its owner's`;
  }
  if (answer.status === 400 && file !== undefined) {
    return [`the gateway refused the mandate in ${file} (${`HTTP 400 ${(answer.body as { code?: string }).code ?? ''}`.trim()}):`, ...violations(answer).map((line) => `  ${line}`)].join('\n');
  }
  return `refused: ${problem}`;
}

const mandatePath = (agentId: string) => `/v1/owner/agents/${encodeURIComponent(agentId)}/mandate`;

/** `acg agent mandate show <agentId>`: the mandate in force with each budget's usage, as JSON. */
export async function showMandate(config: Config, options: MandateCommandOptions): Promise<void> {
  const credential = await ownerCredential(config, options);
  const answer = await call(config, credential, 'GET', mandatePath(options.agentId));
  if (answer.status !== 200) fail(refusal(config, credential, options, answer));
  printJson(answer.body);
}

/** The text of `--file` (`-`: standard input), at most MANDATE_FILE_BYTES_MAX bytes. */
async function readMandateText(file: string): Promise<string> {
  if (file === '-') {
    const chunks: Buffer[] = [];
    let bytes = 0;
    for await (const chunk of process.stdin as AsyncIterable<Buffer>) {
      bytes += chunk.length;
      if (bytes > MANDATE_FILE_BYTES_MAX) fail(`standard input holds more than ${MANDATE_FILE_BYTES_MAX} bytes: that is no mandate`);
      chunks.push(chunk);
    }
    return Buffer.concat(chunks).toString('utf8');
  }
  let stat: Stats;
  try {
    stat = statSync(file);
  } catch (error) {
    fail(`cannot read ${file}: ${unreadable(error as NodeJS.ErrnoException)}`);
  }
  if (stat.isDirectory()) fail(`cannot read ${file}: it is a directory`);
  if (stat.size > MANDATE_FILE_BYTES_MAX) fail(`${file} holds more than ${MANDATE_FILE_BYTES_MAX} bytes: that is no mandate`);
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    fail(`cannot read ${file}: ${unreadable(error as NodeJS.ErrnoException)}`);
  }
}

/** Why a file could not be read, in words; the system's own message (which names the call and the path again) only for the unusual. */
function unreadable(error: NodeJS.ErrnoException): string {
  if (error.code === 'ENOENT') return 'no such file';
  if (error.code === 'ENOTDIR') return 'a part of its path is not a directory';
  if (error.code === 'EACCES' || error.code === 'EPERM') return 'permission denied';
  return error.message;
}

/**
 * The rules of the file: a JSON object, without what `show` prints besides the rules (and for this agent, if it says);
 * and the version a file saved from `show` was read at (its `version`), which `set` makes its change on (none for
 * rules written by hand, or with --force). A `version` that is not a version is refused: sent without If-Match, a
 * hand-edited "2" or 2.5 replaced whatever was in force, the lost update the version is there to prevent.
 */
function mandateFile(text: string, where: string, options: { agentId: string; force: boolean }): { rules: Record<string, unknown>; version: number | undefined } {
  let parsed: unknown;
  try {
    // A byte order mark, which some editors write, is read past (RFC 8259 §8.1: a parser MAY ignore it).
    parsed = JSON.parse(text.replace(/^\uFEFF/, ''));
  } catch (error) {
    fail(`${where} is not JSON: ${(error as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) fail(`${where} must hold a JSON object: the mandate's rules, as \`acg agent mandate show\` prints them`);
  const document = parsed as Record<string, unknown>;
  if (document.agentId !== undefined && document.agentId !== options.agentId) {
    fail(`${where} is the mandate of agent ${String(document.agentId)}, not of ${options.agentId}: remove its agentId to give these rules to ${options.agentId}`);
  }
  const rules = Object.fromEntries(Object.entries(document).filter(([name]) => !(READ_ONLY_MEMBERS as readonly string[]).includes(name)));
  const { version } = document;
  if (options.force || version === undefined) return { rules, version: undefined };
  if (!Number.isSafeInteger(version) || (version as number) < 1) {
    fail(
      `${where} says "version": ${JSON.stringify(version)}, which is no mandate version (a whole number from 1, as \`acg agent mandate show\` prints it): ` +
        'put back the version show printed, or leave "version" out or give --force to replace whatever version is in force',
    );
  }
  return { rules, version: version as number };
}

/**
 * `acg agent mandate set <agentId> --file <path|-> [--force]`: replaces the mandate (a new version; the mandate in force, sent again, writes none) and prints it.
 * A file saved from `show` names the version it was read at, and the change is made only on that version (If-Match):
 * a change made meanwhile elsewhere is not overwritten unless `--force` says so.
 */
export async function setMandate(config: Config, options: MandateCommandOptions & { file: string; force?: boolean }): Promise<void> {
  const where = options.file === '-' ? 'standard input' : options.file;
  const text = await readMandateText(options.file);
  const { rules, version } = mandateFile(text, where, { agentId: options.agentId, force: options.force === true });
  const credential = await ownerCredential(config, options);
  const answer = await call(config, credential, 'PUT', mandatePath(options.agentId), rules, version === undefined ? {} : { 'if-match': `"${version}"` });
  if (answer.status === 412) {
    const current = (answer.body as { currentVersion?: number }).currentVersion;
    fail(
      `not set: ${where} was read at mandate version ${version}, and the mandate has changed since (version ${current} is in force). ` +
        `Run \`npx acg agent mandate show ${options.agentId}\` again and make the change on what it prints, or give --force to replace version ${current} with ${where} as it is`,
    );
  }
  if (answer.status !== 200) fail(refusal(config, credential, options, answer, where));
  printJson(answer.body);
}

/** `acg agent delegates list <agentId>`: the agent and the delegates below it, each with its budgets' usage, as JSON. */
export async function listDelegates(config: Config, options: MandateCommandOptions): Promise<void> {
  const credential = await ownerCredential(config, options);
  const answer = await call(config, credential, 'GET', `/v1/owner/agents/${encodeURIComponent(options.agentId)}/delegates`);
  if (answer.status !== 200) fail(refusal(config, credential, options, answer));
  printJson(answer.body);
}

/**
 * `acg agent delegates create <parentId> --name <name> --subject <subject> [--file <mandate>]`: registers a
 * delegate of the parent, with an identity at the parent's agent identity provider and the mandate of the file
 * (a member left out takes the parent's), and prints it. A wider mandate is refused naming the rule.
 */
export async function createDelegate(config: Config, options: MandateCommandOptions & { name: string; subject: string; file?: string }): Promise<void> {
  const where = options.file === undefined ? undefined : options.file === '-' ? 'standard input' : options.file;
  // A new agent's mandate has no version to make the change on: the file's, if any, is ignored.
  const mandate = options.file === undefined ? undefined : mandateFile(await readMandateText(options.file), where!, { agentId: options.agentId, force: true }).rules;
  const credential = await ownerCredential(config, options);
  const parent = await call(config, credential, 'GET', `/v1/owner/agents/${encodeURIComponent(options.agentId)}`);
  if (parent.status !== 200) fail(refusal(config, credential, options, parent));
  const issuer = (parent.body as { identity: { issuer: string } }).identity.issuer;
  const body = { name: options.name, identity: { issuer, subject: options.subject }, ...(mandate ? { mandate } : {}) };
  const answer = await call(config, credential, 'POST', `/v1/agents/${encodeURIComponent(options.agentId)}/delegates`, body);
  if (answer.status !== 201) {
    // The code and its reason as the wire has them, one after the other (found from outside: the reason in front read as a second code).
    const { code, reason, detail } = answer.body as { code?: string; reason?: string; detail?: string };
    fail(answer.status === 400 && reason ? `the gateway refused the delegate: HTTP 400 ${code ?? ''}, reason ${reason}${detail ? `: ${detail}` : ''}` : refusal(config, credential, options, answer, where));
  }
  printJson(answer.body);
}
