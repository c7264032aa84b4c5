// What a connector is, apart from any one connector: a service module with its actions, and the factory of
// the context those actions run with. The factory is called once per gateway with what the gateway gives
// every connector (its configuration, clock and logger); the builder it returns makes one execution's
// context from facts every execution has, whatever its service (the agent, its allowlists, its stored
// connection for this service). So the pipeline names no connector, and a new built-in service is one
// module plus one entry in the list the catalogue is built from.
import type { Static, TSchema } from '@sinclair/typebox';
import type { Gateway } from '../platform/gateway.ts';
import type { Microcredits } from '../platform/money.ts';
import type { ConnectorError } from './connector-error.ts';

export interface ServiceAction<Ctx, S extends TSchema = TSchema> {
  description: string;
  /** TypeBox schema of `input`; unknown members are refused. */
  input: S;
  priceUc: Microcredits;
  /** Checks that need no network and must refuse before the hold; returns the refusal or null. */
  clearance?(ctx: Ctx, input: Static<S>): ConnectorError | null;
  run(ctx: Ctx, input: Static<S>): Promise<object>;
}

/** What the gateway gives every connector, once, when it builds the connector's context factory. */
export type ConnectorEnvironment = Pick<Gateway, 'config' | 'clock' | 'log'>;

/** What the pipeline knows of every execution, whatever its service: what a context builder gets. */
export interface ExecutionFacts<Connection> {
  agentId: string;
  /** The agent's allowlists as its owner set them (the service and category were cleared already). */
  allowlists: { services: readonly string[]; categories: readonly string[]; inboxes: readonly string[] };
  /**
   * The agent's stored connection for this service (its secrets opened), or null when it has none. Throws
   * the refusal (an ApiError) when a stored one cannot be used, e.g. its password no longer opens.
   */
  connection(): Promise<Connection | null>;
}

/** Builds one execution's context; never touches the network (it runs before the hold). */
export type ContextBuilder<Ctx, Connection> = (facts: ExecutionFacts<Connection>) => Promise<Ctx>;

export interface ServiceModule<Ctx, Connection = unknown> {
  /** Stable id used on the wire (`serviceId`). */
  id: string;
  title: string;
  /** Category recorded on the hold and checked against the agent's allowed categories. */
  category: string;
  actions: Readonly<Record<string, ServiceAction<Ctx>>>;
  /** The context factory: called once per gateway, it returns the builder of one execution's context. */
  context(environment: ConnectorEnvironment): ContextBuilder<Ctx, Connection>;
}

/**
 * A module of whichever context and connection, as a catalogue lists them side by side: each module's
 * factory and actions agree on their own `Ctx`, and the catalogue only ever hands a module's context to
 * that module's actions.
 */
export type AnyServiceModule = ServiceModule<any, any>;
