// The webhook reads, for every face: a merchant's events, its webhook, its deliveries and their attempts
// (its owner, or one of its API keys with the scope: MerchantDirectory's rule), and an owner's own webhook, its
// events and its deliveries (the owner is the caller: nothing of another owner can be named).
import { Type } from '@sinclair/typebox';
import { memberRefusal } from '../platform/errors.ts';
import { IdParams, MerchantIdParams, PageQuery, ResourceId, UnixSeconds, type Page } from '../platform/schemas.ts';
import type { Query } from '../platform/queries.ts';
import type { MerchantDirectory, WebhookMerchant } from './merchant-directory.ts';
import { MERCHANT_EVENT_TYPES, OWNER_EVENT_TYPES } from './outbox.ts';
import type { OwnerWebhookService } from './owner-webhooks.ts';
import type { Attempt, Delivery, OwnerWebhookConfiguration, StoredEvent, WebhookConfiguration, WebhookService } from './service.ts';

export const EventsInput = Type.Object(
  {
    id: IdParams.properties.id,
    type: Type.Optional(Type.String({ maxLength: 500, description: `comma-separated event types (${MERCHANT_EVENT_TYPES.join(', ')}); all when absent` })),
    from: Type.Optional(UnixSeconds('only events created at or after')),
    to: Type.Optional(UnixSeconds('only events created at or before (not before `from`: 400 invalid_input)')),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'page size, 1–100' })),
    startingAfter: Type.Optional(Type.String({ minLength: 1, maxLength: 200, description: 'id of the last event of the previous page (leave it out for the first page); an id that is no event of this list (or one past its retention) is 400 invalid_input' })),
  },
  { additionalProperties: false },
);
export const MerchantWebhookInput = Type.Object({ id: MerchantIdParams.properties.id }, { additionalProperties: false });
export const DeliveriesInput = Type.Object({ id: MerchantIdParams.properties.id, ...PageQuery.properties }, { additionalProperties: false });
export const AttemptsInput = Type.Object({ id: ResourceId, deliveryId: ResourceId }, { additionalProperties: false });
export const OwnerWebhookInput = Type.Object({}, { additionalProperties: false });
export const OwnerEventsInput = Type.Object(
  {
    type: Type.Optional(Type.String({ maxLength: 500, description: `comma-separated event types (${OWNER_EVENT_TYPES.join(', ')}); all when absent` })),
    from: EventsInput.properties.from,
    to: EventsInput.properties.to,
    limit: EventsInput.properties.limit,
    startingAfter: EventsInput.properties.startingAfter,
  },
  { additionalProperties: false },
);
export const OwnerDeliveriesInput = PageQuery;
export const OwnerAttemptsInput = Type.Object({ deliveryId: ResourceId }, { additionalProperties: false });

interface OwnerEventsFilter extends Page {
  type?: string;
  from?: number;
  to?: number;
}

interface EventsFilter extends OwnerEventsFilter {
  id: string;
}

export interface EventQueries {
  /** Its access step checks the type filter (400) before the merchant (404), and hands the parsed types on. */
  listEvents: Query<EventsFilter, { events: StoredEvent[]; hasMore: boolean }, string[]>;
  listDeliveryAttempts: Query<{ id: string; deliveryId: string }, { delivery: Delivery; attempts: Attempt[] }, WebhookMerchant>;
  getMerchantWebhook: Query<{ id: string }, { configuration: WebhookConfiguration }, WebhookMerchant>;
  listWebhookDeliveries: Query<{ id: string } & Page, { deliveries: Delivery[]; hasMore: boolean }, WebhookMerchant>;
  getOwnerWebhook: Query<Record<string, never>, { configuration: OwnerWebhookConfiguration }>;
  /** Its access step checks the type filter (400); the owner is the caller. */
  listOwnerEvents: Query<OwnerEventsFilter, { events: StoredEvent[]; hasMore: boolean }, string[]>;
  listOwnerWebhookDeliveries: Query<Page, { deliveries: Delivery[]; hasMore: boolean }>;
  listOwnerDeliveryAttempts: Query<{ deliveryId: string }, { delivery: Delivery; attempts: Attempt[] }>;
}

/** The event types of a `type` filter (comma-separated; none: all); one not among `known` is 400. */
function eventTypes(filter: string | undefined, known: readonly string[] = MERCHANT_EVENT_TYPES): string[] {
  const types = filter === undefined ? [] : filter.split(',').map((t) => t.trim());
  const unknown = types.find((t) => !known.includes(t));
  if (unknown !== undefined) throw memberRefusal('type', `names an unknown event type "${unknown}"; known: ${known.join(', ')}`);
  return types;
}

export function eventQueries(merchants: MerchantDirectory, webhooks: WebhookService, ownerWebhooks: OwnerWebhookService): EventQueries {
  const reach: Pick<Query<{ id: string }, unknown, WebhookMerchant>, 'access'> = {
    access: (db, { principal, input }) => merchants.reach(db, principal, input.id),
  };
  return {
    listEvents: {
      name: 'listEvents',
      input: EventsInput,
      output: Type.Object({ events: Type.Array(Type.Ref('Event')), hasMore: Type.Boolean() }),
      access: async (db, { principal, input }) => {
        const types = eventTypes(input.type);
        await merchants.reach(db, principal, input.id);
        return types;
      },
      read: (db, { input }, types) => webhooks.listEvents(db, { kind: 'merchant', id: input.id }, { types, from: input.from, to: input.to, limit: input.limit, startingAfter: input.startingAfter }),
    },
    listDeliveryAttempts: {
      name: 'listDeliveryAttempts',
      input: AttemptsInput,
      output: Type.Object({ delivery: Type.Ref('WebhookDelivery'), attempts: Type.Array(Type.Ref('WebhookAttempt')) }),
      ...reach,
      read: (db, { input }) => webhooks.listAttempts(db, { kind: 'merchant', id: input.id }, input.deliveryId),
    },
    getMerchantWebhook: {
      name: 'getMerchantWebhook',
      input: MerchantWebhookInput,
      output: Type.Object({ configuration: Type.Ref('WebhookConfiguration') }),
      ...reach,
      read: async (db, { input }) => ({ configuration: await webhooks.configuration(db, input.id) }),
    },
    listWebhookDeliveries: {
      name: 'listWebhookDeliveries',
      input: DeliveriesInput,
      output: Type.Object({ deliveries: Type.Array(Type.Ref('WebhookDelivery')), hasMore: Type.Boolean() }),
      ...reach,
      read: (db, { input }) => webhooks.listDeliveries(db, { kind: 'merchant', id: input.id }, input),
    },
    getOwnerWebhook: {
      name: 'getOwnerWebhook',
      input: OwnerWebhookInput,
      output: Type.Object({ configuration: Type.Ref('OwnerWebhookConfiguration') }),
      read: (db, { principal }) => ownerWebhooks.configuration(db, principal.ownerId!),
    },
    listOwnerEvents: {
      name: 'listOwnerEvents',
      input: OwnerEventsInput,
      output: Type.Object({ events: Type.Array(Type.Ref('OwnerEvent')), hasMore: Type.Boolean() }),
      access: (_db, { input }) => eventTypes(input.type, OWNER_EVENT_TYPES),
      read: (db, { principal, input }, types) =>
        webhooks.listEvents(db, { kind: 'owner', id: principal.ownerId! }, { types, from: input.from, to: input.to, limit: input.limit, startingAfter: input.startingAfter }),
    },
    listOwnerWebhookDeliveries: {
      name: 'listOwnerWebhookDeliveries',
      input: OwnerDeliveriesInput,
      output: Type.Object({ deliveries: Type.Array(Type.Ref('WebhookDelivery')), hasMore: Type.Boolean() }),
      read: (db, { principal, input }) => webhooks.listDeliveries(db, { kind: 'owner', id: principal.ownerId! }, input),
    },
    listOwnerDeliveryAttempts: {
      name: 'listOwnerDeliveryAttempts',
      input: OwnerAttemptsInput,
      output: Type.Object({ delivery: Type.Ref('WebhookDelivery'), attempts: Type.Array(Type.Ref('WebhookAttempt')) }),
      read: (db, { principal, input }) => webhooks.listAttempts(db, { kind: 'owner', id: principal.ownerId! }, input.deliveryId),
    },
  };
}
