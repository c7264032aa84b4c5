// The webhook reads, for every face: a merchant's events, its webhook, its deliveries and their attempts
// (its owner, or one of its API keys with the scope: MerchantDirectory's rule), and an owner's own webhook.
import { Type } from '@sinclair/typebox';
import { ApiError } from '../platform/errors.ts';
import { IdParams, MerchantIdParams, PageQuery, ResourceId, UnixSeconds, type Page } from '../platform/schemas.ts';
import type { Query } from '../platform/queries.ts';
import type { MerchantDirectory, WebhookMerchant } from './merchant-directory.ts';
import { MERCHANT_EVENT_TYPES } from './outbox.ts';
import type { OwnerWebhookService } from './owner-webhooks.ts';
import type { Attempt, Delivery, OwnerWebhookConfiguration, StoredEvent, WebhookConfiguration, WebhookService } from './service.ts';

export const EventsInput = Type.Object(
  {
    id: IdParams.properties.id,
    type: Type.Optional(Type.String({ maxLength: 500, description: `comma-separated event types (${MERCHANT_EVENT_TYPES.join(', ')}); all when absent` })),
    from: Type.Optional(UnixSeconds('only events created at or after')),
    to: Type.Optional(UnixSeconds('only events created at or before')),
    limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20, description: 'page size, 1–100' })),
    startingAfter: Type.Optional(Type.String({ maxLength: 200, description: 'id of the last event of the previous page' })),
  },
  { additionalProperties: false },
);
export const MerchantWebhookInput = Type.Object({ id: MerchantIdParams.properties.id }, { additionalProperties: false });
export const DeliveriesInput = Type.Object({ id: MerchantIdParams.properties.id, ...PageQuery.properties }, { additionalProperties: false });
export const AttemptsInput = Type.Object({ id: ResourceId, deliveryId: ResourceId }, { additionalProperties: false });
export const OwnerWebhookInput = Type.Object({}, { additionalProperties: false });

interface EventsFilter extends Page {
  id: string;
  type?: string;
  from?: number;
  to?: number;
}

export interface EventQueries {
  /** Its access step checks the type filter (400) before the merchant (404), and hands the parsed types on. */
  listEvents: Query<EventsFilter, { events: StoredEvent[]; hasMore: boolean }, string[]>;
  listDeliveryAttempts: Query<{ id: string; deliveryId: string }, { delivery: Delivery; attempts: Attempt[] }, WebhookMerchant>;
  getMerchantWebhook: Query<{ id: string }, { configuration: WebhookConfiguration }, WebhookMerchant>;
  listWebhookDeliveries: Query<{ id: string } & Page, { deliveries: Delivery[]; hasMore: boolean }, WebhookMerchant>;
  getOwnerWebhook: Query<Record<string, never>, { configuration: OwnerWebhookConfiguration }>;
}

/** The event types of a `type` filter (comma-separated; none: all); an unknown one is 400. */
function eventTypes(filter: string | undefined): string[] {
  const types = filter === undefined ? [] : filter.split(',').map((t) => t.trim());
  const unknown = types.find((t) => !(MERCHANT_EVENT_TYPES as readonly string[]).includes(t));
  if (unknown !== undefined) throw new ApiError('invalid_input', { detail: `type: unknown event type "${unknown}"; known: ${MERCHANT_EVENT_TYPES.join(', ')}` });
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
      read: (db, { input }, types) => webhooks.listEvents(db, input.id, { types, from: input.from, to: input.to, limit: input.limit, startingAfter: input.startingAfter }),
    },
    listDeliveryAttempts: {
      name: 'listDeliveryAttempts',
      input: AttemptsInput,
      output: Type.Object({ delivery: Type.Ref('WebhookDelivery'), attempts: Type.Array(Type.Ref('WebhookAttempt')) }),
      ...reach,
      read: (db, { input }) => webhooks.listAttempts(db, input.id, input.deliveryId),
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
      read: (db, { input }) => webhooks.listDeliveries(db, input.id, input),
    },
    getOwnerWebhook: {
      name: 'getOwnerWebhook',
      input: OwnerWebhookInput,
      output: Type.Object({ configuration: Type.Ref('OwnerWebhookConfiguration') }),
      read: (db, { principal }) => ownerWebhooks.configuration(db, principal.ownerId!),
    },
  };
}
