// The local rail: the owner approves on a gateway page, and approval settles at once. In dev mode it is a
// test-mode payment (livemode false); a self-hoster may run it live, where the approving owner vouches for
// the credit (no card is charged).
import type { Config } from '../../platform/config.ts';
import { approvalPageUrl, type CreditRail, type RailModule } from './rail.ts';

/** How long an owner has to approve a top-up on the local page. */
export const LOCAL_APPROVAL_LIFETIME_S = 86_400;

function localRail(config: Pick<Config, 'baseUrl' | 'mode'>): CreditRail {
  return {
    async open(draft, nowS) {
      const url = approvalPageUrl(config.baseUrl, draft.id);
      return { approvalUrl: url, checkoutUrl: url, providerRef: null, livemode: config.mode === 'live', expiresAtS: nowS + LOCAL_APPROVAL_LIFETIME_S };
    },
    async cancel() {},
  };
}

export const LOCAL_RAIL = {
  kind: 'local',
  title: "the gateway's approval page",
  resolution: 'owner_approval',
  paymentMethod: 'owner_approval',
  ownerAction: 'approve it',
  create: localRail,
} as const satisfies RailModule;
