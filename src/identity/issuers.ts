// Where the keys of the two external identity providers come from: a configured JWKS URL, OIDC
// discovery from the issuer, or (dev mode without configuration) the built-in local issuers.
// Remote key sets are cached and refetched when a token names an unknown `kid` (jose's behaviour).
import { createLocalJWKSet, createRemoteJWKSet, type JWTVerifyGetKey } from 'jose';
import { cleartextOffLoopback, type Config, type IssuerConfig } from '../platform/config.ts';
import { devIssuerUrl, loadDevIssuerKeys, publicJwks, type DevIssuerKind } from './dev-issuers.ts';

export type IdentityProviderKind = 'human' | 'agent';

export interface IdentityProvider {
  kind: IdentityProviderKind;
  issuer: string;
  audience: string;
  keys: JWTVerifyGetKey;
  source: 'configured' | 'built_in';
}

const DISCOVERY_TIMEOUT_MS = 5000;
/** A token naming an unknown `kid` refetches the key set, at most once per this interval (key rotation at the provider). */
const JWKS_REFETCH_COOLDOWN_MS = 1000;
const JWKS_CACHE_MAX_AGE_MS = 10 * 60 * 1000;
const REMOTE_JWKS_OPTIONS = { timeoutDuration: DISCOVERY_TIMEOUT_MS, cooldownDuration: JWKS_REFETCH_COOLDOWN_MS, cacheMaxAge: JWKS_CACHE_MAX_AGE_MS };
/** Algorithms we accept from identity providers: asymmetric only, never `none`, never HMAC. */
export const EXTERNAL_ALGORITHMS = ['ES256', 'ES384', 'RS256', 'PS256', 'EdDSA'];

function remoteKeys(issuerConfig: IssuerConfig, mode: Config['mode']): JWTVerifyGetKey {
  let resolved: Promise<JWTVerifyGetKey> | undefined;
  const resolve = async (): Promise<JWTVerifyGetKey> => {
    if (issuerConfig.jwksUrl) return createRemoteJWKSet(new URL(issuerConfig.jwksUrl), REMOTE_JWKS_OPTIONS);
    // The issuer's terminating slash is removed before the suffix is appended (OIDC Discovery §4.1).
    const response = await fetch(`${issuerConfig.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`, {
      signal: AbortSignal.timeout(DISCOVERY_TIMEOUT_MS),
      redirect: 'error',
    });
    if (!response.ok) throw new Error(`OIDC discovery for ${issuerConfig.issuer} answered ${response.status}`);
    const metadata = (await response.json()) as { issuer?: unknown; jwks_uri?: unknown };
    if (metadata.issuer !== issuerConfig.issuer || typeof metadata.jwks_uri !== 'string') {
      throw new Error(`OIDC discovery for ${issuerConfig.issuer} returned a mismatched issuer or no jwks_uri`);
    }
    // Live mode takes keys over https only, as it does the configured URLs (loadConfig): a discovery document
    // naming a cleartext jwks_uri would let whoever sits on that path mint any identity (RFC 8414 §2).
    if (mode === 'live' && cleartextOffLoopback(metadata.jwks_uri)) {
      throw new Error(`OIDC discovery for ${issuerConfig.issuer} named a cleartext jwks_uri (${metadata.jwks_uri}); live mode fetches keys over https only`);
    }
    return createRemoteJWKSet(new URL(metadata.jwks_uri), REMOTE_JWKS_OPTIONS);
  };
  return async (header, token) => {
    // A failed discovery is retried on the next token rather than cached forever.
    resolved ??= resolve().catch((error: unknown) => {
      resolved = undefined;
      throw error;
    });
    return (await resolved)(header, token);
  };
}

export async function identityProviders(config: Config): Promise<Partial<Record<IdentityProviderKind, IdentityProvider>>> {
  const providers: Partial<Record<IdentityProviderKind, IdentityProvider>> = {};
  const devKeys = config.mode === 'dev' && (!config.humanIssuer || !config.agentIssuer) ? await loadDevIssuerKeys(config.dataDir) : undefined;
  for (const kind of ['human', 'agent'] as const) {
    const configured = kind === 'human' ? config.humanIssuer : config.agentIssuer;
    if (configured) {
      providers[kind] = { kind, issuer: configured.issuer, audience: configured.audience, keys: remoteKeys(configured, config.mode), source: 'configured' };
    } else if (devKeys) {
      providers[kind] = {
        kind,
        // The base URL may be learnt after listening (port 0), so the issuer is read when used.
        get issuer() {
          return devIssuerUrl(config.baseUrl, kind as DevIssuerKind);
        },
        audience: 'agent-credit-gateway',
        keys: createLocalJWKSet(publicJwks(devKeys, kind)),
        source: 'built_in',
      };
    }
  }
  return providers;
}
