// The execute operation, for every face: the catalogue's services and actions, the input schema that
// checks each action's input, and the steps (who executes → claim the key → clear, hold, run, capture).
import { Type, type Static } from '@sinclair/typebox';
import type { MultiStepOperation } from '../platform/operations.ts';
import { SERVICES } from '../services/catalogue.ts';
import { EXECUTE_OPERATION, type ExecuteResult, type ExecuteService } from './service.ts';

/** Component name of an action's input schema, e.g. `MailMessagesListInput`. */
function inputSchemaId(serviceId: string, action: string): string {
  const words = `${serviceId} ${action}`.split(/[^A-Za-z0-9]+/).filter(Boolean);
  return `${words.map((word) => word[0]!.toUpperCase() + word.slice(1)).join('')}Input`;
}

export const CATALOGUE = SERVICES.flatMap((service) =>
  Object.entries(service.actions).map(([action, definition]) => ({ service, action, definition, schemaId: inputSchemaId(service.id, action) })),
);

const ACTION_NAMES = [...new Set(CATALOGUE.map((entry) => entry.action))];

/**
 * The envelope, plus one `if serviceId and action are … then input is …` rule per action, so a bad input
 * is refused with the path of the offending member and the document shows each action's input schema.
 */
export const ExecuteInput = Type.Object(
  {
    serviceId: Type.String({ enum: SERVICES.map((service) => service.id) }),
    action: Type.String({ enum: ACTION_NAMES, description: 'an action of the service (see the table)' }),
    input: Type.Object({}, { additionalProperties: true, description: "the action's input; its schema is the `…Input` component named in the table" }),
    agentId: Type.Optional(
      Type.String({ minLength: 1, maxLength: 200, description: "required with an owner (H or O) credential: the executing agent, one of the owner's; an agent may omit it or send its own id" }),
    ),
  },
  {
    additionalProperties: false,
    allOf: CATALOGUE.map(({ service, action, schemaId }) => ({
      if: { properties: { serviceId: { const: service.id }, action: { const: action } }, required: ['serviceId', 'action'] },
      then: { properties: { input: Type.Ref(schemaId) } },
    })),
    examples: [{ serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'hello-world' } }],
  },
);
export type ExecuteInput = Static<typeof ExecuteInput>;

export interface ExecuteOperations {
  /** Checked before the key: the catalogue has the action, and which agent executes (its id). */
  executeService: MultiStepOperation<ExecuteInput, ExecuteResult, string>;
}

export function executeOperations(execute: ExecuteService): ExecuteOperations {
  return {
    executeService: {
      name: EXECUTE_OPERATION,
      input: ExecuteInput,
      idempotency: { key: 'required', missingCode: 'invalid_input' },
      check: ({ principal, input }) => {
        execute.checkRequest(input.serviceId, input.action);
        return execute.actingAgentId(principal, input.agentId);
      },
      runClaimed: (key, { input }, agentId) => execute.execute(key, { agentId, serviceId: input.serviceId, action: input.action, input: input.input }),
    },
  };
}
