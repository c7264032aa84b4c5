// `acg demo`: a whole purchase against the running dev gateway, told as the HTTP requests a developer
// would send and the fields of each answer that matter. Safe to run again: it finds the owner's agent,
// merchant and offer it made before, tops the agent up to the same credit, and buys again.
//
// The purchase holds two vouchers so that both ends of a hold show: the first is captured in part (the
// merchant delivered less than the price) and the rest returns to the agent; the second is released
// (nothing delivered), so all of it returns.
import { randomUUID } from 'node:crypto';
import { createRemoteJWKSet, jwtVerify } from 'jose';
import { loadDevIssuerKeys, mintDevToken } from '../identity/dev-issuers.ts';
import { missingCredential, noGatewayAt } from '../operator/client.ts';
import { presentedOperatorToken } from '../operator/credential.ts';
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

/** An answer of the gateway: read field by field and printed, never passed on. */
type Json = Record<string, any>;

/** Why the demo stopped: exit 2 when it could not start talking to a gateway (a refusal), 1 when a step failed. */
class DemoFailure extends Error {
  constructor(
    message: string,
    readonly exitCode: 1 | 2 = 1,
  ) {
    super(message);
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

  async call(call: Call): Promise<{ status: number; body: Json }> {
    const idempotent = call.method === 'POST';
    const headers: Record<string, string> = { authorization: `Bearer ${call.token}` };
    if (call.body !== undefined) headers['content-type'] = 'application/json';
    if (idempotent) headers['idempotency-key'] = randomUUID();
    const body = call.body === undefined ? '' : ` ${JSON.stringify(call.body)}`;
    process.stdout.write(`  →   ${call.method} ${call.path}${body}\n        (Authorization: Bearer <${call.as}>${idempotent ? ', Idempotency-Key: <uuid>' : ''})\n`);
    let response: Response;
    try {
      response = await fetch(`${this.config.baseUrl}${call.path}`, {
        method: call.method,
        headers,
        body: call.body === undefined ? undefined : JSON.stringify(call.body),
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
    } catch (error) {
      const code = (error as { cause?: { code?: string } }).cause?.code;
      // Nothing to talk to at the address (refused, no such host): the command's refusal, exit 2 as the others'.
      if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EAI_AGAIN') throw new DemoFailure(noGatewayAt(this.config), 2);
      throw new DemoFailure(`${call.method} ${call.path} failed: ${code ?? (error as Error).message}`);
    }
    const text = await response.text();
    let parsed: Json;
    try {
      parsed = (text ? JSON.parse(text) : {}) as Json;
    } catch {
      // Something else answers at the address (another dev server on the port): the command's refusal, exit 2.
      throw new DemoFailure(`${call.method} ${call.path} answered HTTP ${response.status} with a body that is not JSON: is the gateway at ${this.config.baseUrl}?`, 2);
    }
    if (!call.expect.includes(response.status)) {
      throw new DemoFailure(`${call.method} ${call.path} answered HTTP ${response.status} ${parsed.code ?? ''}: ${parsed.detail ?? parsed.title ?? text}`);
    }
    return { status: response.status, body: parsed };
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
  const operator = presentedOperatorToken(config);
  if (!operator) refuse(await missingCredential(config));
  process.stdout.write(`acg demo: a whole purchase against ${config.baseUrl}, as the HTTP requests a developer would send\n`);
  try {
    await purchase(new Demo(config), config, operator);
  } catch (error) {
    if (!(error instanceof DemoFailure)) throw error;
    process.stderr.write(`\nacg demo stopped: ${error.message}\n`);
    process.exit(error.exitCode);
  }
}

async function purchase(demo: Demo, config: Config, operator: string): Promise<void> {
  const tokens = await devTokens(config);
  const human = { token: tokens.human, as: 'owner session' };
  const agentCredential = { token: tokens.agent, as: 'agent identity token' };
  const identity = { issuer: `${config.baseUrl}/dev/issuers/agent`, subject: AGENT_SUBJECT };

  demo.title('Owner: a human session from the built-in dev issuer (npx acg dev token human --email …)');
  const me = await demo.call({ method: 'GET', path: '/v1/me', ...human, expect: [200] });
  demo.answer(me.status, `owner ${me.body.owner.id} (${me.body.owner.email})`);

  demo.title('Agent: registered by its owner (reused when it exists)');
  const agents = await demo.call({ method: 'GET', path: '/v1/owner/agents?limit=100', ...human, expect: [200] });
  let agent: Json | undefined = agents.body.agents.find((a: Json) => a.identity.issuer === identity.issuer && a.identity.subject === identity.subject);
  if (agent) {
    demo.answer(agents.status, `agent ${agent.id} exists: reusing it`);
  } else {
    const created = await demo.call({ method: 'POST', path: '/v1/owner/agents', ...human, body: { name: 'Demo agent', identity }, expect: [201] });
    agent = created.body;
    demo.answer(created.status, `agent ${agent!.id} (${identity.subject} at the dev agent issuer)`);
  }
  const agentId = String(agent!.id);

  demo.title(`Credit: top the agent up to ${credits(TARGET_AVAILABLE_UC)} (operator grant, what npx acg credit grant sends)`);
  const before = await demo.call({ method: 'GET', path: `/v1/owner/agents/${agentId}/balance`, ...human, expect: [200] });
  const shortUc = TARGET_AVAILABLE_UC - BigInt(before.body.availableUc);
  demo.answer(before.status, `available ${credits(before.body.availableUc)}`);
  if (shortUc > 0n) {
    const grant = await demo.call({
      method: 'POST',
      path: '/v1/operator/credit-grants',
      token: operator,
      as: 'operator credential',
      body: { agentId, amountUc: shortUc.toString(), note: 'acg demo top-up' },
      expect: [201],
    });
    demo.answer(grant.status, `lot ${grant.body.lot.id}: ${credits(grant.body.lot.grantedUc)} granted, journaled`);
  } else {
    demo.say('already enough credit: no grant');
  }

  demo.title(`Merchant: ${MERCHANT_DOMAIN}, registered by the same owner (reused when it exists)`);
  const merchants = await demo.call({ method: 'GET', path: '/v1/merchants?limit=100', ...human, expect: [200] });
  let merchant: Json | undefined = merchants.body.merchants.find((m: Json) => m.domain === MERCHANT_DOMAIN);
  if (merchant) {
    demo.answer(merchants.status, `merchant ${merchant.id} exists: reusing it (verified: ${merchant.verified})`);
  } else {
    const created = await demo.call({
      method: 'POST',
      path: '/v1/merchants',
      ...human,
      body: { name: 'Demo shop', domain: MERCHANT_DOMAIN, categories: [CATEGORY] },
      expect: [201],
    });
    merchant = created.body.merchant;
    demo.answer(created.status, `merchant ${merchant!.id}; publish ${created.body.dnsRecord.name} TXT "${short(created.body.dnsRecord.value)}"`);
  }
  const merchantId = String(merchant!.id);

  demo.title("DNS proof: publish the merchant's TXT record in the dev DNS zone (npx acg dev dns publish --merchant …)");
  const published = await demo.call({ method: 'POST', path: '/dev/dns/records', token: operator, as: 'operator credential', body: { merchantId }, expect: [200] });
  demo.answer(published.status, `${published.body.record.name} TXT "${short(published.body.record.value)}" (served over DNS-over-HTTPS at /dev/dns-query)`);

  demo.title('Domain verification: the gateway asks its resolver (in dev mode the dev zone) for the record');
  const verified = await demo.call({ method: 'POST', path: `/v1/merchants/${merchantId}/verify-domain`, ...human, expect: [200] });
  demo.answer(verified.status, `verified: ${verified.body.verified}`);

  demo.title("API key: the merchant server's credential, shown once");
  const scopes = ['access:check', 'offers:read', 'redemptions:capture', 'redemptions:release', 'earnings:read'];
  const key = await demo.call({ method: 'POST', path: `/v1/merchants/${merchantId}/api-keys`, ...human, body: { name: 'acg demo', scopes }, expect: [201] });
  const merchantKey = { token: String(key.body.secretKey), as: 'merchant API key' };
  demo.answer(key.status, `key ${key.body.apiKey.keyId} (${short(merchantKey.token)}), scopes ${scopes.join(' ')}`);

  demo.title(`Offer: "${OFFER_NAME}" at ${credits(PRICE_UC)} (reused when it exists)`);
  const offers = await demo.call({ method: 'GET', path: `/v1/merchants/${merchantId}/offers?limit=100`, ...human, expect: [200] });
  let offer: Json | undefined = offers.body.offers.find((o: Json) => o.name === OFFER_NAME && o.active && o.priceUc === PRICE_UC.toString());
  if (offer) {
    demo.answer(offers.status, `offer ${offer.id} exists: reusing it`);
  } else {
    const created = await demo.call({
      method: 'POST',
      path: `/v1/merchants/${merchantId}/offers`,
      ...human,
      body: { name: OFFER_NAME, category: CATEGORY, priceUc: PRICE_UC.toString() },
      expect: [201],
    });
    offer = created.body;
    demo.answer(created.status, `offer ${offer!.id}: ${credits(offer!.priceUc)}, category ${offer!.category}`);
  }
  const offerId = String(offer!.id);

  demo.title('Merchant check: may this agent, whose identity the merchant verified itself, use the offer?');
  const check = await demo.call({ method: 'POST', path: '/v1/access/merchant-check', ...merchantKey, body: { offerId, agentIdentity: identity }, expect: [200] });
  demo.answer(check.status, `agent ${check.body.agentId}: allowed ${check.body.allowed}, paymentRequired ${check.body.paymentRequired}, price ${credits(check.body.priceUc)}`);

  demo.title('Voucher 1: the agent takes a hold for the offer and gets a signed voucher');
  const first = await demo.call({ method: 'POST', path: '/v1/vouchers', ...agentCredential, body: { offerId }, expect: [200] });
  const firstHold = first.body.redemption as Json;
  demo.answer(first.status, `hold ${firstHold.id}: ${credits(firstHold.amountUc)} held; voucher ${short(String(first.body.voucher))}`);

  demo.title("Voucher check: the merchant verifies the voucher against the gateway's JWKS (jose)");
  process.stdout.write(`  →   GET /.well-known/jwks.json, then jwtVerify(voucher, jwks, {issuer, audience: merchant id, typ: voucher+jwt})\n`);
  const jwks = createRemoteJWKSet(new URL(`${config.baseUrl}/.well-known/jwks.json`));
  let claims: Json;
  try {
    ({ payload: claims } = await jwtVerify(String(first.body.voucher), jwks, { issuer: config.baseUrl, audience: merchantId, typ: 'voucher+jwt', algorithms: ['ES256'] }));
  } catch (error) {
    throw new DemoFailure(`the voucher did not verify: ${(error as Error).message}`);
  }
  if (claims.jti !== firstHold.id || claims.sub !== agentId || claims.offer_id !== offerId) throw new DemoFailure('the voucher does not name this hold, agent and offer');
  demo.answer(200, `valid ES256 signature; sub ${claims.sub}, jti ${claims.jti} (= the hold), amount_uc ${claims.amount_uc}, offer_id ${claims.offer_id}`);

  demo.title('Redemption read: the merchant looks the hold up by the voucher jti');
  const read = await demo.call({ method: 'GET', path: `/v1/redemptions/${firstHold.id}`, ...merchantKey, expect: [200] });
  demo.answer(read.status, `state ${read.body.state}, ${credits(read.body.amountUc)} held until ${new Date(read.body.expiresAt * 1000).toISOString()}`);

  demo.title(`Capture part: the merchant delivered less than the price, so it captures ${credits(CAPTURE_UC)}`);
  const captured = await demo.call({ method: 'POST', path: `/v1/redemptions/${firstHold.id}/capture`, ...merchantKey, body: { amountUc: CAPTURE_UC.toString() }, expect: [200] });
  const returned = BigInt(captured.body.amountUc) - BigInt(captured.body.capturedUc);
  demo.answer(captured.status, `state ${captured.body.state}, captured ${credits(captured.body.capturedUc)}; the other ${credits(returned)} went back to the agent's lot`);

  demo.title('Voucher 2: a second purchase of the same offer');
  const second = await demo.call({ method: 'POST', path: '/v1/vouchers', ...agentCredential, body: { offerId }, expect: [200] });
  const secondHold = second.body.redemption as Json;
  demo.answer(second.status, `hold ${secondHold.id}: ${credits(secondHold.amountUc)} held`);

  demo.title('Release: the merchant could not deliver, so it releases the whole hold');
  const released = await demo.call({ method: 'POST', path: `/v1/redemptions/${secondHold.id}/release`, ...merchantKey, body: {}, expect: [200] });
  demo.answer(released.status, `state ${released.body.state}; all ${credits(released.body.amountUc)} back with the agent`);

  demo.title("Balances: the agent's credit and the merchant's earnings");
  const balance = await demo.call({ method: 'GET', path: `/v1/owner/agents/${agentId}/balance`, ...human, expect: [200] });
  const b = balance.body;
  demo.answer(balance.status, `agent ${agentId}: available ${credits(b.availableUc)}, held ${credits(b.heldUc)}, captured ${credits(b.capturedUc)}, granted ${credits(b.grantedUc)}`);
  const earnings = await demo.call({ method: 'GET', path: `/v1/merchants/${merchantId}/earnings`, ...merchantKey, expect: [200] });
  demo.answer(earnings.status, `merchant ${merchantId}: earned ${credits(earnings.body.earnedUc)}`);

  demo.title('Clean-up: revoke the API key this run made, so re-runs do not pile keys up');
  const revoked = await demo.call({ method: 'POST', path: `/v1/merchants/${merchantId}/api-keys/${key.body.apiKey.keyId}/revoke`, ...human, expect: [200] });
  demo.answer(revoked.status, `key ${revoked.body.apiKey.keyId} revoked`);

  process.stdout.write(
    `\ndone: agent ${agentId} available=${b.availableUc} held=${b.heldUc} captured=${b.capturedUc} granted=${b.grantedUc}; merchant ${merchantId} earned=${earnings.body.earnedUc}\n`,
  );
}
