// `acg demo`: a whole purchase against the running dev gateway, told as the HTTP requests a developer
// would send and the fields of each answer that matter. Safe to run again: it finds the owner's agent,
// merchant and offer it made before, tops the agent up to the same credit, and buys again.
//
// The purchase holds two vouchers so that both ends of a hold show: the first is captured in part (the
// merchant delivered less than the price) and the rest returns to the agent; the second is released
// (nothing delivered), so all of it returns.
import { randomUUID } from 'node:crypto';
import { createRemoteJWKSet, jwtVerify, type JWTPayload } from 'jose';
import { loadDevIssuerKeys, mintDevToken } from '../identity/dev-issuers.ts';
import { bearer, gatewayMode, liveGatewayAt, missingCredential, noGatewayAt, operatorCredentialFor } from '../operator/client.ts';
import type { Config } from '../platform/config.ts';

const OWNER_EMAIL = 'demo-owner@example.com';
const AGENT_SUBJECT = 'acg-demo-agent';
const MERCHANT_DOMAIN = 'demo-shop.example.com';
const CATEGORY = 'reports';
const OFFER_NAME = 'Demo report';
const PRICE_UC = 2_000_000n;
const CAPTURE_UC = 1_500_000n;
/** Each run tops the agent up to this, so every run buys from the same balance. */
const TARGET_AVAILABLE_UC = 5_000_000n;
const STEPS = 17;
const REQUEST_TIMEOUT_MS = 30_000;
/** How often a run asks for a hold when runs started together keep spending the credit it topped up. */
const MINT_ATTEMPTS = 3;

/**
 * Why the demo stopped: a step the gateway refused, an answer that is not the gateway's, a voucher that did not verify.
 * Exit 2, as every acg command's refusal (found from outside: a refused step exited 1, which the credit commands
 * keep for a broken ledger invariant).
 */
class DemoFailure extends Error {}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** An amount of µc as the gateway writes it: a string of digits (kept to what a bigint of the ledger holds). */
const AMOUNT_UC = /^-?[0-9]{1,19}$/;

/**
 * An answer of the gateway, read only through the fields a step needs, each with its kind. A field that is missing,
 * or of another kind, means that what answers is not the gateway (or not this version of it): the demo stops with
 * one line naming the request and the field, exit 2, as it does for a body that is not JSON.
 */
class Answer {
  constructor(
    readonly status: number,
    private readonly body: unknown,
    /** `GET /v1/me answered HTTP 200`, for the line that names a missing field. */
    private readonly source: string,
    private readonly baseUrl: string,
    /** Where this answer sits in the body it came from (`agents[3].`), for an element of a list. */
    private readonly at = '',
  ) {}

  text(path: string): string {
    return this.field(path, 'a string', (value): value is string => typeof value === 'string');
  }

  flag(path: string): boolean {
    return this.field(path, 'true or false', (value): value is boolean => typeof value === 'boolean');
  }

  seconds(path: string): number {
    return this.field(path, 'a number', (value): value is number => typeof value === 'number' && Number.isFinite(value));
  }

  amountUc(path: string): bigint {
    return BigInt(this.field(path, 'an amount in µc', (value): value is string => typeof value === 'string' && AMOUNT_UC.test(value)));
  }

  /** The problem's code and words, for a refusal the caller expected (its status was listed). */
  problem(): { code: string; detail: string } {
    const body = isObject(this.body) ? this.body : {};
    return { code: String(body.code ?? ''), detail: String(body.detail ?? body.title ?? '') };
  }

  /** A list of objects, each read as an answer of its own. */
  list(path: string): Answer[] {
    const items = this.field(path, 'a list', (value): value is unknown[] => Array.isArray(value));
    return items.map((item, index) => new Answer(this.status, item, this.source, this.baseUrl, `${this.at}${path}[${index}].`));
  }

  private field<T>(path: string, kind: string, fits: (value: unknown) => value is T): T {
    let value: unknown = this.body;
    for (const name of path.split('.')) value = isObject(value) ? value[name] : undefined;
    if (fits(value)) return value;
    const field = `${this.at}${path}`;
    const found = value === undefined || value === null ? `without ${field}` : `with ${field} not ${kind}`;
    throw new DemoFailure(`${this.source} ${found}: is the gateway at ${this.baseUrl}?`);
  }
}

interface Call {
  method: 'GET' | 'POST';
  path: string;
  token: string;
  /** Who the bearer token belongs to, for the printed request. */
  as: string;
  body?: unknown;
  /** Statuses that are answers, not failures. */
  expect: number[];
}

/** An amount as a person reads it, `1.5 credits (1500000 µc)`; exactly one is `1 credit`. */
export function credits(uc: bigint | string): string {
  const value = BigInt(uc);
  const whole = value / 1_000_000n;
  const fraction = (value % 1_000_000n).toString().padStart(6, '0').replace(/0+$/, '');
  return `${whole}${fraction ? `.${fraction}` : ''} ${value === 1_000_000n ? 'credit' : 'credits'} (${value} µc)`;
}

function short(secret: string): string {
  return `${secret.slice(0, 14)}…`;
}

/** How many times the demo sends a request the gateway answered 503 with Retry-After, and the longest it waits between. */
const DEMO_ATTEMPTS = 3;
const RETRY_WAIT_MAX_S = 5;

class Demo {
  private step = 0;

  constructor(private readonly config: Config) {}

  title(text: string): void {
    this.step += 1;
    process.stdout.write(`\n[${this.step}/${STEPS}] ${text}\n`);
  }

  say(text: string): void {
    process.stdout.write(`      ${text}\n`);
  }

  async call(call: Call): Promise<Answer> {
    const idempotent = call.method === 'POST';
    let authorization: string;
    try {
      authorization = bearer(call.token);
    } catch (error) {
      throw new DemoFailure(`${call.method} ${call.path}: ${(error as Error).message}`);
    }
    const headers: Record<string, string> = { authorization };
    if (call.body !== undefined) headers['content-type'] = 'application/json';
    if (idempotent) headers['idempotency-key'] = randomUUID();
    const body = call.body === undefined ? '' : ` ${JSON.stringify(call.body)}`;
    process.stdout.write(`  →   ${call.method} ${call.path}${body}\n        (Authorization: Bearer <${call.as}>${idempotent ? ', Idempotency-Key: <uuid>' : ''})\n`);
    let response: Response;
    for (let attempt = 1; ; attempt++) {
      try {
        response = await fetch(`${this.config.baseUrl}${call.path}`, {
          method: call.method,
          headers,
          body: call.body === undefined ? undefined : JSON.stringify(call.body),
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
      } catch (error) {
        const code = (error as { cause?: { code?: string } }).cause?.code;
        // Nothing to talk to at the address (refused, no such host).
        if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN') throw new DemoFailure(noGatewayAt(this.config));
        throw new DemoFailure(`${call.method} ${call.path} failed: ${code ?? (error as Error).message}`);
      }
      // A 503 with Retry-After is the gateway's "not now" (its database slow or away): a client waits and sends the same
      // request again, with the same Idempotency-Key, as the demo shows (found in CI: four runs at once on a loaded machine).
      const retryAfter = response.headers.get('retry-after');
      const retryAfterS = retryAfter === null ? Number.NaN : Number(retryAfter);
      if (response.status !== 503 || call.expect.includes(503) || !(retryAfterS >= 0) || attempt === DEMO_ATTEMPTS) break;
      await response.body?.cancel();
      const waitS = Math.min(retryAfterS, RETRY_WAIT_MAX_S);
      this.answer(503, `the gateway is busy (Retry-After: ${retryAfterS}): sending it again in ${waitS} s${idempotent ? ', with the same Idempotency-Key' : ''}`);
      await new Promise((resolve) => setTimeout(resolve, waitS * 1000));
    }
    const text = await response.text();
    let parsed: unknown;
    try {
      parsed = text ? JSON.parse(text) : {};
    } catch {
      // Something else answers at the address (another dev server on the port).
      throw new DemoFailure(`${call.method} ${call.path} answered HTTP ${response.status} with a body that is not JSON: is the gateway at ${this.config.baseUrl}?`);
    }
    if (!call.expect.includes(response.status)) {
      const problem = isObject(parsed) ? parsed : {};
      // The gateway refuses with a problem body, never with nothing: something else answers at the address.
      if (response.status >= 400 && typeof problem.code !== 'string') {
        throw new DemoFailure(`${call.method} ${call.path} answered HTTP ${response.status} with no problem body: is the gateway at ${this.config.baseUrl}?`);
      }
      throw new DemoFailure(`${call.method} ${call.path} answered HTTP ${response.status} ${problem.code ?? ''}: ${problem.detail ?? problem.title ?? text}`);
    }
    return new Answer(response.status, parsed, `${call.method} ${call.path} answered HTTP ${response.status}`, this.config.baseUrl);
  }

  answer(status: number, text: string): void {
    process.stdout.write(`  ←   ${status} ${text}\n`);
  }
}

async function devTokens(config: Config) {
  const keys = await loadDevIssuerKeys(config.dataDir);
  const mint = (kind: 'human' | 'agent') =>
    mintDevToken(keys, {
      baseUrl: config.baseUrl,
      audience: 'agent-credit-gateway',
      kind,
      subject: kind === 'human' ? `human:${OWNER_EMAIL}` : AGENT_SUBJECT,
      email: OWNER_EMAIL,
      ownerEmail: OWNER_EMAIL,
      ownerEmailClaim: config.agentOwnerEmailClaim,
      nowS: Math.floor(Date.now() / 1000),
    });
  return { human: await mint('human'), agent: await mint('agent') };
}

function refuse(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

export async function runDemo(config: Config): Promise<void> {
  if (config.mode !== 'dev') refuse('acg demo works in dev mode only: it uses the built-in identity issuers and the dev DNS zone');
  if (config.humanIssuer || config.agentIssuer) refuse('acg demo needs the built-in dev identity issuers (unset ACG_HUMAN_ISSUER / ACG_AGENT_ISSUER)');
  // A live gateway has neither: said before anything else (found from outside: the credential advice led to "dev mode only").
  if ((await gatewayMode(config.baseUrl)) === 'live') refuse(liveGatewayAt(config.baseUrl, 'acg demo is for a dev gateway: it uses the built-in identity issuers and the dev DNS zone'));
  const operator = await operatorCredentialFor(config);
  if (!operator) refuse(await missingCredential(config));
  process.stdout.write(`acg demo: a whole purchase against ${config.baseUrl}, as the HTTP requests a developer would send\n`);
  try {
    await purchase(new Demo(config), config, operator);
  } catch (error) {
    if (!(error instanceof DemoFailure)) throw error;
    process.stderr.write(`\nacg demo stopped: ${error.message}\n`);
    process.exit(2);
  }
}

interface Bearer {
  token: string;
  as: string;
}

/** Grants what the agent's available credit lacks of the target, so every run buys from the same balance. */
async function topUp(demo: Demo, agentId: string, human: Bearer, operator: string): Promise<void> {
  const before = await demo.call({ method: 'GET', path: `/v1/owner/agents/${agentId}/balance`, ...human, expect: [200] });
  const shortUc = TARGET_AVAILABLE_UC - before.amountUc('availableUc');
  demo.answer(before.status, `available ${credits(before.amountUc('availableUc'))}`);
  if (shortUc <= 0n) {
    demo.say('already enough credit: no grant');
    return;
  }
  const grant = await demo.call({
    method: 'POST',
    path: '/v1/operator/credit-grants',
    token: operator,
    as: 'operator credential',
    body: { agentId, amountUc: shortUc.toString(), note: 'acg demo top-up' },
    expect: [201],
  });
  demo.answer(grant.status, `lot ${grant.text('lot.id')}: ${credits(grant.amountUc('lot.grantedUc'))} granted, journaled`);
}

/**
 * A hold for the offer. Another run buying for the same agent at the same time (two demos started together) can
 * spend the credit this run topped up: the gateway refuses with 402, and the run tops up again and asks once more.
 */
async function mintVoucher(demo: Demo, offerId: string, agent: Bearer, topUpAgain: () => Promise<void>): Promise<Answer> {
  for (let attempt = 1; ; attempt += 1) {
    const last = attempt === MINT_ATTEMPTS;
    const minted = await demo.call({ method: 'POST', path: '/v1/vouchers', ...agent, body: { offerId }, expect: last ? [200] : [200, 402] });
    if (minted.status === 200) return minted;
    const { code, detail } = minted.problem();
    if (code !== 'INSUFFICIENT_CREDITS') throw new DemoFailure(`POST /v1/vouchers answered HTTP 402 ${code}: ${detail}`);
    demo.answer(minted.status, 'INSUFFICIENT_CREDITS: another run spent the credit meanwhile; topping up again');
    await topUpAgain();
  }
}

async function purchase(demo: Demo, config: Config, operator: string): Promise<void> {
  const tokens = await devTokens(config);
  const human = { token: tokens.human, as: 'owner session' };
  const agentCredential = { token: tokens.agent, as: 'agent identity token' };
  const identity = { issuer: `${config.baseUrl}/dev/issuers/agent`, subject: AGENT_SUBJECT };

  demo.title('Owner: a human session from the built-in dev issuer (npx acg dev token human --email …)');
  const me = await demo.call({ method: 'GET', path: '/v1/me', ...human, expect: [200] });
  demo.answer(me.status, `owner ${me.text('owner.id')} (${me.text('owner.email')})`);

  demo.title('Agent: registered by its owner (reused when it exists)');
  const agents = await demo.call({ method: 'GET', path: '/v1/owner/agents?limit=100', ...human, expect: [200] });
  const found = agents.list('agents').find((a) => a.text('identity.issuer') === identity.issuer && a.text('identity.subject') === identity.subject);
  let agentId: string;
  if (found) {
    agentId = found.text('id');
    demo.answer(agents.status, `agent ${agentId} exists: reusing it`);
  } else {
    const created = await demo.call({ method: 'POST', path: '/v1/owner/agents', ...human, body: { name: 'Demo agent', identity }, expect: [201, 409] });
    if (created.status === 201) {
      agentId = created.text('id');
      demo.answer(created.status, `agent ${agentId} (${identity.subject} at the dev agent issuer)`);
    } else {
      // Another run registered it between the list and this request (two demos started together): reuse it.
      const again = await demo.call({ method: 'GET', path: '/v1/owner/agents?limit=100', ...human, expect: [200] });
      const made = again.list('agents').find((a) => a.text('identity.issuer') === identity.issuer && a.text('identity.subject') === identity.subject);
      if (!made) throw new DemoFailure(`POST /v1/owner/agents answered HTTP 409, and no agent with the demo's identity is among the owner's agents`);
      agentId = made.text('id');
      demo.answer(again.status, `agent ${agentId} was registered meanwhile by another run: reusing it`);
    }
  }

  demo.title(`Credit: top the agent up to ${credits(TARGET_AVAILABLE_UC)} (operator grant, what npx acg credit grant sends)`);
  await topUp(demo, agentId, human, operator);

  demo.title(`Merchant: ${MERCHANT_DOMAIN}, registered by the same owner (reused when it exists)`);
  const merchants = await demo.call({ method: 'GET', path: '/v1/merchants?limit=100', ...human, expect: [200] });
  const merchantFound = merchants.list('merchants').find((m) => m.text('domain') === MERCHANT_DOMAIN);
  let merchantId: string;
  if (merchantFound) {
    merchantId = merchantFound.text('id');
    demo.answer(merchants.status, `merchant ${merchantId} exists: reusing it (verified: ${merchantFound.flag('verified')})`);
  } else {
    const created = await demo.call({
      method: 'POST',
      path: '/v1/merchants',
      ...human,
      body: { name: 'Demo shop', domain: MERCHANT_DOMAIN, categories: [CATEGORY] },
      expect: [201],
    });
    merchantId = created.text('merchant.id');
    demo.answer(created.status, `merchant ${merchantId}; publish ${created.text('dnsRecord.name')} TXT "${short(created.text('dnsRecord.value'))}"`);
  }

  demo.title("DNS proof: publish the merchant's TXT record in the dev DNS zone (npx acg dev dns publish --merchant …)");
  const published = await demo.call({ method: 'POST', path: '/dev/dns/records', token: operator, as: 'operator credential', body: { merchantId }, expect: [200] });
  demo.answer(published.status, `${published.text('record.name')} TXT "${short(published.text('record.value'))}" (served over DNS-over-HTTPS at /dev/dns-query)`);

  demo.title('Domain verification: the gateway asks its resolver (in dev mode the dev zone) for the record');
  const verified = await demo.call({ method: 'POST', path: `/v1/merchants/${merchantId}/verify-domain`, ...human, expect: [200] });
  demo.answer(verified.status, `verified: ${verified.flag('verified')}`);

  demo.title("API key: the merchant server's credential, shown once");
  const scopes = ['access:check', 'offers:read', 'redemptions:capture', 'redemptions:release', 'earnings:read'];
  const key = await demo.call({ method: 'POST', path: `/v1/merchants/${merchantId}/api-keys`, ...human, body: { name: 'acg demo', scopes }, expect: [201] });
  const merchantKey = { token: key.text('secretKey'), as: 'merchant API key' };
  const keyId = key.text('apiKey.keyId');
  demo.answer(key.status, `key ${keyId} (${short(merchantKey.token)}), scopes ${scopes.join(' ')}`);

  demo.title(`Offer: "${OFFER_NAME}" at ${credits(PRICE_UC)} (reused when it exists)`);
  const offers = await demo.call({ method: 'GET', path: `/v1/merchants/${merchantId}/offers?limit=100`, ...human, expect: [200] });
  const offerFound = offers.list('offers').find((o) => o.text('name') === OFFER_NAME && o.flag('active') && o.amountUc('priceUc') === PRICE_UC);
  let offerId: string;
  if (offerFound) {
    offerId = offerFound.text('id');
    demo.answer(offers.status, `offer ${offerId} exists: reusing it`);
  } else {
    const created = await demo.call({
      method: 'POST',
      path: `/v1/merchants/${merchantId}/offers`,
      ...human,
      body: { name: OFFER_NAME, category: CATEGORY, priceUc: PRICE_UC.toString() },
      expect: [201],
    });
    offerId = created.text('id');
    demo.answer(created.status, `offer ${offerId}: ${credits(created.amountUc('priceUc'))}, category ${created.text('category')}`);
  }

  demo.title('Merchant check: may this agent, whose identity the merchant verified itself, use the offer?');
  const check = await demo.call({ method: 'POST', path: '/v1/access/merchant-check', ...merchantKey, body: { offerId, agentIdentity: identity }, expect: [200] });
  demo.answer(
    check.status,
    `agent ${check.text('agentId')}: allowed ${check.flag('allowed')}, paymentRequired ${check.flag('paymentRequired')}, price ${credits(check.amountUc('priceUc'))}`,
  );

  demo.title('Voucher 1: the agent takes a hold for the offer and gets a signed voucher');
  const first = await mintVoucher(demo, offerId, agentCredential, () => topUp(demo, agentId, human, operator));
  const firstHoldId = first.text('redemption.id');
  const voucher = first.text('voucher');
  demo.answer(first.status, `hold ${firstHoldId}: ${credits(first.amountUc('redemption.amountUc'))} held; voucher ${short(voucher)}`);

  demo.title("Voucher check: the merchant verifies the voucher against the gateway's JWKS (jose)");
  process.stdout.write(`  →   GET /.well-known/jwks.json, then jwtVerify(voucher, jwks, {issuer, audience: merchant id, typ: voucher+jwt})\n`);
  const jwks = createRemoteJWKSet(new URL(`${config.baseUrl}/.well-known/jwks.json`));
  let claims: JWTPayload;
  try {
    ({ payload: claims } = await jwtVerify(voucher, jwks, { issuer: config.baseUrl, audience: merchantId, typ: 'voucher+jwt', algorithms: ['ES256'] }));
  } catch (error) {
    throw new DemoFailure(`the voucher did not verify: ${(error as Error).message}`);
  }
  if (claims.jti !== firstHoldId || claims.sub !== agentId || claims.offer_id !== offerId) throw new DemoFailure('the voucher does not name this hold, agent and offer');
  demo.answer(200, `valid ES256 signature; sub ${claims.sub}, jti ${claims.jti} (= the hold), amount_uc ${String(claims.amount_uc)}, offer_id ${String(claims.offer_id)}`);

  demo.title('Redemption read: the merchant looks the hold up by the voucher jti');
  const read = await demo.call({ method: 'GET', path: `/v1/redemptions/${firstHoldId}`, ...merchantKey, expect: [200] });
  demo.answer(read.status, `state ${read.text('state')}, ${credits(read.amountUc('amountUc'))} held until ${new Date(read.seconds('expiresAt') * 1000).toISOString()}`);

  demo.title(`Capture part: the merchant delivered less than the price, so it captures ${credits(CAPTURE_UC)}`);
  const captured = await demo.call({ method: 'POST', path: `/v1/redemptions/${firstHoldId}/capture`, ...merchantKey, body: { amountUc: CAPTURE_UC.toString() }, expect: [200] });
  const capturedPartUc = captured.amountUc('capturedUc');
  const returned = captured.amountUc('amountUc') - capturedPartUc;
  demo.answer(captured.status, `state ${captured.text('state')}, captured ${credits(capturedPartUc)}; the other ${credits(returned)} went back to the agent's lot`);

  demo.title('Voucher 2: a second purchase of the same offer');
  const second = await mintVoucher(demo, offerId, agentCredential, () => topUp(demo, agentId, human, operator));
  const secondHoldId = second.text('redemption.id');
  demo.answer(second.status, `hold ${secondHoldId}: ${credits(second.amountUc('redemption.amountUc'))} held`);

  demo.title('Release: the merchant could not deliver, so it releases the whole hold');
  const released = await demo.call({ method: 'POST', path: `/v1/redemptions/${secondHoldId}/release`, ...merchantKey, body: {}, expect: [200] });
  demo.answer(released.status, `state ${released.text('state')}; all ${credits(released.amountUc('amountUc'))} back with the agent`);

  demo.title("Balances: the agent's credit and the merchant's earnings");
  const balance = await demo.call({ method: 'GET', path: `/v1/owner/agents/${agentId}/balance`, ...human, expect: [200] });
  const availableUc = balance.amountUc('availableUc');
  const heldUc = balance.amountUc('heldUc');
  const capturedUc = balance.amountUc('capturedUc');
  const grantedUc = balance.amountUc('grantedUc');
  demo.answer(balance.status, `agent ${agentId}: available ${credits(availableUc)}, held ${credits(heldUc)}, captured ${credits(capturedUc)}, granted ${credits(grantedUc)}`);
  const earnings = await demo.call({ method: 'GET', path: `/v1/merchants/${merchantId}/earnings`, ...merchantKey, expect: [200] });
  const earnedUc = earnings.amountUc('earnedUc');
  demo.answer(earnings.status, `merchant ${merchantId}: earned ${credits(earnedUc)}`);

  demo.title('Clean-up: revoke the API key this run made, so re-runs do not pile keys up');
  const revoked = await demo.call({ method: 'POST', path: `/v1/merchants/${merchantId}/api-keys/${keyId}/revoke`, ...human, expect: [200] });
  demo.answer(revoked.status, `key ${revoked.text('apiKey.keyId')} revoked`);

  process.stdout.write(
    `\ndone: agent ${agentId} available=${availableUc} held=${heldUc} captured=${capturedUc} granted=${grantedUc}; merchant ${merchantId} earned=${earnedUc}\n`,
  );
}
