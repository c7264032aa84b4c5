// What a connector is, apart from any one connector: a service module with its actions. Each connector
// declares the context it needs (`Ctx`); the catalogue composes those into the context of one execution.
import type { Static, TSchema } from '@sinclair/typebox';
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

export interface ServiceModule<Ctx> {
  /** Stable id used on the wire (`serviceId`). */
  id: string;
  title: string;
  /** Category recorded on the hold and checked against the agent's allowed categories. */
  category: string;
  actions: Readonly<Record<string, ServiceAction<Ctx>>>;
}
