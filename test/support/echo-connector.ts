// A third connector, for tests only: it proves that a service is one module plus one entry in the list the
// gateway is composed with (AppDependencies.services), with no change to the pipeline. `echo` `say` repeats
// a message for 2.5 credits. Its context comes from its own factory, built once from the gateway's
// environment, and from each execution's facts (the agent). The message chooses what the "upstream" does:
//   outcome `answer` (default)  the message back;
//   outcome `not_found`         404 upstream_not_found (definitive: the answer is stored);
//   outcome `unavailable`       502 upstream_unavailable (retryable: the key is given back).
// Its clearance refuses, before any hold, a message that contains `forbidden`.
import { Type, type Static } from '@sinclair/typebox';
import { ConnectorError } from '../../src/connectors/connector-error.ts';
import type { ServiceModule } from '../../src/connectors/types.ts';

export const ECHO_SERVICE_ID = 'echo';
export const ECHO_CATEGORY = 'testing';
export const ECHO_PRICE_UC = 2_500_000n;
export const REFUSED_WORD = 'forbidden';

export const EchoSayInput = Type.Object(
  {
    message: Type.String({ minLength: 1, maxLength: 200 }),
    outcome: Type.Optional(Type.Union([Type.Literal('answer'), Type.Literal('not_found'), Type.Literal('unavailable')])),
  },
  { additionalProperties: false },
);
type EchoSayInput = Static<typeof EchoSayInput>;

export interface EchoContext {
  agentId: string;
  /** From the gateway's configuration, read once by the factory. */
  mode: string;
}

/** What the test reads back: how often the factory ran, how many contexts it built, what ran. */
export interface EchoCounters {
  factories: number;
  contexts: number;
  runs: EchoSayInput[];
}

export function echoConnector(): { module: ServiceModule<EchoContext>; counters: EchoCounters } {
  const counters: EchoCounters = { factories: 0, contexts: 0, runs: [] };
  const module: ServiceModule<EchoContext> = {
    id: ECHO_SERVICE_ID,
    title: 'Echo (tests only)',
    category: ECHO_CATEGORY,
    context: ({ config }) => {
      counters.factories += 1;
      const mode = config.mode;
      return async (execution) => {
        counters.contexts += 1;
        return { agentId: execution.agentId, mode };
      };
    },
    actions: {
      say: {
        description: 'Repeats a message (tests only).',
        input: EchoSayInput,
        priceUc: ECHO_PRICE_UC,
        clearance: (_ctx: EchoContext, input: EchoSayInput) =>
          input.message.includes(REFUSED_WORD) ? new ConnectorError('invalid_input', `echo does not repeat "${REFUSED_WORD}"`) : null,
        run: async (ctx: EchoContext, input: EchoSayInput) => {
          counters.runs.push(input);
          if (input.outcome === 'not_found') throw new ConnectorError('upstream_not_found', 'the echo has nothing to say back');
          if (input.outcome === 'unavailable') throw new ConnectorError('upstream_unavailable', 'the echo is out of reach');
          return { echoed: input.message, agentId: ctx.agentId, mode: ctx.mode };
        },
      },
    },
  };
  return { module, counters };
}
