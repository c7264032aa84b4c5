// The composition root: which features the gateway serves, in order.
import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { docsRoutes } from './docs/routes.ts';
import { healthRoutes } from './health/routes.ts';
import { keysRoutes } from './keys/routes.ts';
import type { Gateway } from './platform/gateway.ts';
import { buildApp } from './platform/http/app.ts';

export const FEATURES: FastifyPluginAsync[] = [healthRoutes, docsRoutes, keysRoutes];

export async function buildGatewayApp(gateway: Gateway, extraFeatures: FastifyPluginAsync[] = []): Promise<FastifyInstance> {
  return buildApp(gateway, { features: [...FEATURES, ...extraFeatures] });
}
