// The registry of payment rails: how credit can arrive. ACG_PAYMENT_PROVIDER names the configured one
// (`none`: top-ups stay readable, none can be made). A new rail (x402 next) is one module beside these and
// one entry here.
import type { Config } from '../../platform/config.ts';
import { LOCAL_RAIL } from './local.ts';
import type { CreditRail, RailModule } from './rail.ts';
import { STRIPE_RAIL } from './stripe.ts';

export const RAILS = {
  [LOCAL_RAIL.kind]: LOCAL_RAIL,
  [STRIPE_RAIL.kind]: STRIPE_RAIL,
} as const satisfies Record<string, RailModule>;

/** A rail's name: ACG_PAYMENT_PROVIDER's value and a top-up's `provider`. */
export type RailKind = keyof typeof RAILS;

export const RAIL_KINDS = Object.keys(RAILS) as RailKind[];

/** The rail top-ups go through, with what its registry entry says of it. */
export interface ConfiguredRail {
  module: RailModule & { kind: RailKind };
  rail: CreditRail;
}

/** The configured rail, or undefined without one. */
export function configuredRail(config: Config): ConfiguredRail | undefined {
  const { provider } = config.payments;
  if (provider === 'none') return undefined;
  const module = RAILS[provider];
  const rail = module.create(config);
  return rail ? { module, rail } : undefined;
}
