// The catalogue of built-in services, as data. Adding a service is adding one module to SERVICES; the
// execute pipeline only ever goes through prepareAction, so it needs no change.
//
// Pipeline order (spec, POST /v1/services/execute): clearance → hold → run → capture. prepareAction does
// every check that needs no network (known service and action, input schema, the action's clearance such
// as the mail inbox allowlist), so a refusal never takes a hold. A ConnectorError thrown by run() means the
// action did not complete and the hold is released.
import type { TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import type { Microcredits } from '../platform/money.ts';
import { ConnectorError } from './connector-error.ts';
import { githubPublicService, type GitHubServiceContext } from './github-public.ts';
import { mailService, type MailContext } from './mail.ts';
import type { ServiceModule } from './types.ts';

export { ConnectorError, CONNECTOR_ERROR_CODES, type ConnectorErrorCode } from './connector-error.ts';
export { inboxAllowed } from './mail.ts';

/** What an action needs to run, built by the pipeline for one execution: every connector's context. */
export type ServiceContext = GitHubServiceContext & MailContext;

export const SERVICES: readonly ServiceModule<ServiceContext>[] = [mailService, githubPublicService];

export function findService(serviceId: string): ServiceModule<ServiceContext> | undefined {
  return SERVICES.find((service) => service.id === serviceId);
}

export interface PreparedAction {
  service: ServiceModule<ServiceContext>;
  actionName: string;
  priceUc: Microcredits;
  /** Runs the action with the validated input; throws ConnectorError when it did not complete. */
  run(): Promise<object>;
}

const INPUT_ERRORS_SHOWN_MAX = 3;

function invalidInput(schema: TSchema, input: unknown): ConnectorError {
  const problems = [...Value.Errors(schema, input)]
    .slice(0, INPUT_ERRORS_SHOWN_MAX)
    .map((error) => `${error.path || '/'}: ${error.message}`);
  return new ConnectorError('invalid_input', `input is not valid: ${problems.join('; ')}`);
}

/**
 * Resolves and checks one execution without touching the network. Throws ConnectorError
 * (invalid_input, inbox_not_allowed, connector_not_configured) — all before any hold is taken.
 */
export function prepareAction(ctx: ServiceContext, serviceId: string, actionName: string, input: unknown): PreparedAction {
  const service = findService(serviceId);
  if (!service) throw new ConnectorError('invalid_input', `unknown service "${serviceId}"`);
  const action = Object.hasOwn(service.actions, actionName) ? service.actions[actionName] : undefined;
  if (!action) throw new ConnectorError('invalid_input', `service "${serviceId}" has no action "${actionName}"`);
  if (!Value.Check(action.input, input)) throw invalidInput(action.input, input);
  const refusal = action.clearance?.(ctx, input);
  if (refusal) throw refusal;
  return { service, actionName, priceUc: action.priceUc, run: () => action.run(ctx, input) };
}
