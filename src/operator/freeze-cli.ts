// `acg agent freeze|unfreeze`: an owner stops one of its agents (and every delegate below it) from spending on a
// running gateway, optionally releasing their outstanding holds and revoking those vouchers, through the same
// owner routes every other client uses (POST /v1/owner/agents/{id}/freeze, …/unfreeze), and prints the answer
// as JSON (the freeze report says which merchants were told, and whether the telling arrived). The owner
// credential is the mandate commands': ACG_OWNER_TOKEN, or in dev mode --owner-email.
import type { Config } from '../platform/config.ts';
import { describeProblem, type GatewayAnswer } from './client.ts';
import { call, fail, ownerCredential, printJson, type OwnerCredential } from './mandate-cli.ts';

export interface FreezeCommandOptions {
  agentId: string;
  ownerToken?: string;
  ownerEmail?: string;
}

/** Why the gateway refused, said in the command's terms. */
function refusal(config: Config, credential: OwnerCredential, agentId: string, answer: GatewayAnswer): string {
  const problem = describeProblem(answer);
  if (answer.status === 401) {
    return `the gateway at ${config.baseUrl} does not accept the owner credential from ${credential.source} (${problem}): it has expired, or is not a session of this gateway's human identity provider`;
  }
  if (answer.status === 403) {
    return `the credential from ${credential.source} is not an owner's (${problem}): an agent is frozen and unfrozen with its owner's session, not an agent's or a merchant's credential`;
  }
  if (answer.status === 404) {
    return `no agent ${agentId} among the agents of the owner of ${credential.source} (${problem}): check the agent id, and that the credential is its owner's`;
  }
  return `refused: ${problem}`;
}

const agentPath = (agentId: string, action: 'freeze' | 'unfreeze') => `/v1/owner/agents/${encodeURIComponent(agentId)}/${action}`;

/** `acg agent freeze <agentId> [--release-holds]`: prints `{agent, freeze}` (the freeze report) as JSON. */
export async function freezeAgent(config: Config, options: FreezeCommandOptions & { releaseHolds: boolean }): Promise<void> {
  const credential = await ownerCredential(config, options);
  const answer = await call(config, credential, 'POST', agentPath(options.agentId, 'freeze'), { releaseHolds: options.releaseHolds });
  if (answer.status !== 200) fail(refusal(config, credential, options.agentId, answer));
  printJson(answer.body);
}

/** `acg agent unfreeze <agentId>`: prints the agent as JSON. */
export async function unfreezeAgent(config: Config, options: FreezeCommandOptions): Promise<void> {
  const credential = await ownerCredential(config, options);
  const answer = await call(config, credential, 'POST', agentPath(options.agentId, 'unfreeze'));
  if (answer.status !== 200) fail(refusal(config, credential, options.agentId, answer));
  printJson(answer.body);
}
