// The composition root: builds each feature's service once, then serves the features in order.
import { randomBytes } from 'node:crypto';
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { docsRoutes } from './docs/routes.ts';
import { healthRoutes } from './health/routes.ts';
import { identityProviders } from './identity/issuers.ts';
import { identityRoutes } from './identity/routes.ts';
import { IdentityService } from './identity/service.ts';
import { ensureRuntimeSecret } from './identity/store.ts';
import { CredentialVerifier } from './identity/verifier.ts';
import { integrationRoutes } from './integrations/routes.ts';
import { keysRoutes } from './keys/routes.ts';
import type { Gateway } from './platform/gateway.ts';
import { buildApp } from './platform/http/app.ts';

/** The merchant API key pepper: configured, or in dev mode generated once and shared through the database. */
async function apiKeyPepper(gateway: Gateway): Promise<string | undefined> {
  if (gateway.config.apiKeyPepper) return gateway.config.apiKeyPepper;
  if (gateway.config.mode !== 'dev') return undefined;
  return ensureRuntimeSecret(gateway.db, 'api_key_pepper', randomBytes(32).toString('base64url'), gateway.clock.nowS());
}

export interface Services {
  verifier: CredentialVerifier;
  identity: IdentityService;
  apiKeyPepper: string | undefined;
}

export async function buildServices(gateway: Gateway): Promise<Services> {
  const providers = await identityProviders(gateway.config);
  const pepper = await apiKeyPepper(gateway);
  const verifier = new CredentialVerifier(gateway, providers, pepper);
  const identity = new IdentityService(gateway, () => providers.agent?.issuer);
  return { verifier, identity, apiKeyPepper: pepper };
}

export async function buildGatewayApp(gateway: Gateway, extraFeatures: FastifyPluginAsync[] = []): Promise<FastifyInstance> {
  const services = await buildServices(gateway);
  const providers = { human: services.verifier.provider('human'), agent: services.verifier.provider('agent') };
  const features: FastifyPluginAsync[] = [
    healthRoutes,
    docsRoutes,
    keysRoutes,
    identityRoutes({ identity: services.identity }),
    integrationRoutes({ providers, apiKeysAvailable: services.apiKeyPepper !== undefined, paymentApprovalConfigured: () => false }),
    ...extraFeatures,
  ];
  return buildApp(gateway, { features, authenticator: services.verifier });
}
