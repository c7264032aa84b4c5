// What both sides read from a PaymentRequirements of this scheme: the contract's `extra` members, checked
// once here so the client and the server refuse the same malformed requirements with the same words.
import type { PaymentRequirements } from '@x402/core/types';
import { AMOUNT_UC_DIGITS_MAX, AMOUNT_UC_PATTERN, CREDIT_ASSET, CREDIT_BINDING_VERSION, CREDIT_NETWORK, CREDIT_SCHEME } from './constants.js';
import { CreditError } from './errors.js';

/** The `extra` of this scheme's requirements (the draft's members, plus the gateway's offer and the resource). */
export interface CreditRequirementsExtra {
  /** The binding version (semver), `1.0.0`. */
  version: string;
  /** The gateway's base URL: the trust anchor, facilitator base and attestation `iss`. */
  authority: string;
  /** The merchant's offer; its price is the most one request may authorize. */
  offerId: string;
  /** The resource as the server states it; the attestation is bound to it. */
  resource: string;
}

/** A base URL without its trailing slashes: how an authority is written and compared. */
export function authorityOf(gatewayUrl: string): string {
  let url: URL;
  try {
    url = new URL(gatewayUrl);
  } catch {
    throw new TypeError(`the gateway URL ${JSON.stringify(gatewayUrl)} is not a URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new TypeError(`the gateway URL must be http(s), got ${url.protocol}`);
  if (url.search || url.hash || url.username || url.password) throw new TypeError('the gateway URL must have no query, fragment or credentials');
  return `${url.origin}${url.pathname}`.replace(/\/+$/, '');
}

/** Whether these requirements are this scheme's on this network (whatever their other members say). */
export function isCreditRequirements(requirements: Pick<PaymentRequirements, 'scheme' | 'network'>): boolean {
  return requirements.scheme === CREDIT_SCHEME && requirements.network === CREDIT_NETWORK;
}

function stringMember(extra: Record<string, unknown>, name: string): string {
  const value = extra[name];
  if (typeof value !== 'string' || value.length === 0) throw new CreditError('unsupported_requirements', `extra.${name} is missing or not a string`);
  return value;
}

/** The requirements' credit terms, or `CreditError('unsupported_requirements')` naming what is wrong. */
export function creditTerms(requirements: PaymentRequirements): CreditRequirementsExtra & { amountUc: string; merchantId: string } {
  if (!isCreditRequirements(requirements)) {
    throw new CreditError('unsupported_requirements', `expected ${CREDIT_SCHEME} on ${CREDIT_NETWORK}, got ${requirements.scheme} on ${requirements.network}`);
  }
  if (requirements.asset !== CREDIT_ASSET) throw new CreditError('unsupported_requirements', `the asset must be ${CREDIT_ASSET}, got ${requirements.asset}`);
  if (typeof requirements.amount !== 'string' || !AMOUNT_UC_PATTERN.test(requirements.amount)) {
    throw new CreditError('unsupported_requirements', `the amount must be an integer of microcredits of at most ${AMOUNT_UC_DIGITS_MAX} digits, got ${String(requirements.amount)}`);
  }
  if (typeof requirements.payTo !== 'string' || requirements.payTo.length === 0) throw new CreditError('unsupported_requirements', 'payTo (the merchant id) is missing');
  const extra = requirements.extra ?? {};
  const version = stringMember(extra, 'version');
  if (version.split('.')[0] !== CREDIT_BINDING_VERSION.split('.')[0]) {
    throw new CreditError('unsupported_requirements', `binding version ${version} is not supported (this package speaks ${CREDIT_BINDING_VERSION})`);
  }
  return {
    version,
    authority: stringMember(extra, 'authority'),
    offerId: stringMember(extra, 'offerId'),
    resource: stringMember(extra, 'resource'),
    amountUc: requirements.amount,
    merchantId: requirements.payTo,
  };
}
