// The catalogue of services, built from a list of modules given at composition (the built-in list, plus
// what the composition root adds). Everything that shows or checks services reads one catalogue: the
// execute body schema, the OpenAPI table, MCP's execute tool, the agents' service ids, /v1/integrations.
//
// Pipeline order (spec, POST /v1/services/execute): clearance → hold → run → capture. Preparing an action
// does every check that needs no network (known service and action, input schema, the action's clearance
// such as the mail inbox allowlist), so a refusal never takes a hold. A ConnectorError thrown by run()
// means the action did not complete and the hold is released.
import type { TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import type { Microcredits } from '../platform/money.ts';
import { ConnectorError } from './connector-error.ts';
import { githubPublicService } from './github-public.ts';
import { mailService } from './mail.ts';
import type { AnyServiceModule, ConnectorEnvironment, ContextBuilder, ExecutionFacts, ServiceAction } from './types.ts';

export { ConnectorError, CONNECTOR_ERROR_CODES, type ConnectorErrorCode } from './connector-error.ts';

/** The built-in services: the catalogue of every gateway unless its composition adds more. */
export const BUILT_IN_SERVICES: readonly AnyServiceModule[] = [mailService, githubPublicService];

/** One action of the catalogue, as the documentation and the schemas list it. */
export interface CatalogueAction {
  service: AnyServiceModule;
  action: string;
  definition: ServiceAction<unknown>;
  /** Component name of the action's input schema, e.g. `MailMessagesListInput`. */
  schemaId: string;
}

export interface PreparedAction {
  service: AnyServiceModule;
  actionName: string;
  priceUc: Microcredits;
  /** Runs the action with the validated input; throws ConnectorError when it did not complete. */
  run(): Promise<object>;
}

/** An action whose service, name and input are known good; its context is still to be built. */
interface CheckedAction {
  service: AnyServiceModule;
  actionName: string;
  action: ServiceAction<unknown>;
  input: unknown;
}

const INPUT_ERRORS_SHOWN_MAX = 3;

function inputSchemaId(serviceId: string, action: string): string {
  const words = `${serviceId} ${action}`.split(/[^A-Za-z0-9]+/).filter(Boolean);
  return `${words.map((word) => word[0]!.toUpperCase() + word.slice(1)).join('')}Input`;
}

function invalidInput(schema: TSchema, input: unknown): ConnectorError {
  const problems = [...Value.Errors(schema, input)]
    .slice(0, INPUT_ERRORS_SHOWN_MAX)
    .map((error) => `${error.path || '/'}: ${error.message}`);
  return new ConnectorError('invalid_input', `input is not valid: ${problems.join('; ')}`);
}

/** The action's own clearance with the execution's context; the prepared action runs with that context. */
function bind(checked: CheckedAction, ctx: unknown): PreparedAction {
  const refusal = checked.action.clearance?.(ctx, checked.input);
  if (refusal) throw refusal;
  return { service: checked.service, actionName: checked.actionName, priceUc: checked.action.priceUc, run: () => checked.action.run(ctx, checked.input) };
}

export class Catalogue {
  readonly actions: readonly CatalogueAction[];
  private readonly byId: ReadonlyMap<string, AnyServiceModule>;

  constructor(readonly services: readonly AnyServiceModule[]) {
    this.byId = new Map(services.map((service) => [service.id, service]));
    if (this.byId.size !== services.length) throw new Error(`the catalogue lists a service id twice: ${services.map((service) => service.id).join(', ')}`);
    this.actions = services.flatMap((service) =>
      Object.entries(service.actions).map(([action, definition]) => ({ service, action, definition, schemaId: inputSchemaId(service.id, action) })),
    );
    const schemaIds = new Set(this.actions.map((entry) => entry.schemaId));
    if (schemaIds.size !== this.actions.length) throw new Error('two catalogue actions have the same input schema name');
  }

  get ids(): string[] {
    return this.services.map((service) => service.id);
  }

  find(serviceId: string): AnyServiceModule | undefined {
    return this.byId.get(serviceId);
  }

  /** Known service and action, and a valid input; throws ConnectorError invalid_input otherwise. */
  check(serviceId: string, actionName: string, input: unknown): CheckedAction {
    const service = this.find(serviceId);
    if (!service) throw new ConnectorError('invalid_input', `unknown service "${serviceId}"`);
    const action: ServiceAction<unknown> | undefined = Object.hasOwn(service.actions, actionName) ? service.actions[actionName] : undefined;
    if (!action) throw new ConnectorError('invalid_input', `service "${serviceId}" has no action "${actionName}"`);
    if (!Value.Check(action.input, input)) throw invalidInput(action.input, input);
    return { service, actionName, action, input };
  }

  /**
   * Resolves and checks one execution with a context already built, without touching the network. Throws
   * ConnectorError (invalid_input, inbox_not_allowed, connector_not_configured) — all before any hold.
   */
  prepare(ctx: unknown, serviceId: string, actionName: string, input: unknown): PreparedAction {
    return bind(this.check(serviceId, actionName, input), ctx);
  }

  /** The catalogue for one gateway: each module's context factory called once, with the gateway's environment. */
  open(environment: ConnectorEnvironment): Connectors {
    return new Connectors(this, new Map(this.services.map((service) => [service.id, service.context(environment)])));
  }
}

/** The catalogue's modules with their context builders: what the execute pipeline prepares actions with. */
export class Connectors {
  constructor(
    readonly catalogue: Catalogue,
    private readonly builders: ReadonlyMap<string, ContextBuilder<unknown, unknown>>,
  ) {}

  /**
   * The checks that need no context (service, action, input), then the execution's context from its facts,
   * then the action's clearance. Throws ConnectorError, or the ApiError a stored connection refuses with.
   */
  async prepare(serviceId: string, actionName: string, input: unknown, facts: ExecutionFacts<unknown>): Promise<PreparedAction> {
    const checked = this.catalogue.check(serviceId, actionName, input);
    const build = this.builders.get(checked.service.id)!;
    return bind(checked, await build(facts));
  }
}
