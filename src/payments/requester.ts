// Who asked for a top-up, and so wrote the reason its owner reads: the agent, its owner, or the gateway itself
// (execute's automatic top-up when credit is short). Stored as `topups.requested_by`: the caller's principal scope
// (`agent:…`, `human:…`, `owner:…`) or the gateway's own mark.

export type TopupRequester = 'agent' | 'owner' | 'gateway';

/** The `requested_by` of the top-ups the gateway opens itself. */
export const GATEWAY_REQUESTER = 'gateway';

/** Who a top-up's `requested_by` names; only agents and owners may call the top-up route, so any other scope is an owner's. */
export function requesterOf(requestedBy: string): TopupRequester {
  if (requestedBy === GATEWAY_REQUESTER) return 'gateway';
  return requestedBy.startsWith('agent:') ? 'agent' : 'owner';
}
