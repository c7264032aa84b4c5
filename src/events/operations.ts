// The webhook operations, for every face: a merchant's webhook (configure it, pause or resume it, rotate its
// secret, re-send a delivery or a past event) and an owner's (configure, delete, re-send a delivery or a past
// event). Who may act for a merchant
// is the merchants feature's rule, asked through MerchantDirectory inside the operation's transaction; an
// owner's webhook is the principal's own.
import { Type, type Static } from '@sinclair/typebox';
import { idOf, MerchantIdParams } from '../platform/schemas.ts';
import { inputOf, type SingleStepOperation, type ResolvedBy } from '../platform/operations.ts';
import type { MerchantDirectory } from './merchant-directory.ts';
import { OWNER_WEBHOOK_SECRET_REPLAY_NOTICE, type OwnerWebhookService } from './owner-webhooks.ts';
import { ROTATION_OVERLAP_DEFAULT_S, ROTATION_OVERLAP_MAX_S, WEBHOOK_SECRET_REPLAY_NOTICE, type Delivery, type WebhookService } from './service.ts';
import { WEBHOOK_URL_CHARS_MAX } from './webhook-url.ts';

export const WebhookPut = Type.Object(
  {
    url: Type.String({ minLength: 1, maxLength: WEBHOOK_URL_CHARS_MAX, description: 'https URL on the verified domain or a subdomain; port 443; no query, fragment or credentials' }),
    enabled: Type.Optional(Type.Boolean({ default: true })),
    rotateSecret: Type.Optional(
      Type.Boolean({ default: false, description: 'true: issue a new secret now; the old one stops signing at once (rotate-secret gives an overlap)' }),
    ),
    deliverMissed: Type.Optional(
      Type.Boolean({ default: true, description: 'when this PUT resumes a paused webhook: deliver the events of the pause (true) or only new ones' }),
    ),
  },
  { examples: [{ url: 'https://books.example.com/hooks/acg', enabled: true }], additionalProperties: false },
);

export const WebhookPatch = Type.Object(
  {
    enabled: Type.Boolean({ description: 'false pauses deliveries (events are still kept and listed); true resumes' }),
    deliverMissed: Type.Optional(
      Type.Boolean({
        default: true,
        description: 'on resume: true delivers every event of the pause; false delivers only new events (those of the pause stay listed and can be re-sent)',
      }),
    ),
  },
  { additionalProperties: false, examples: [{ enabled: true, deliverMissed: true }] },
);

export const RotateBody = Type.Object(
  {
    overlapSeconds: Type.Optional(
      Type.Integer({
        minimum: 0,
        maximum: ROTATION_OVERLAP_MAX_S,
        default: ROTATION_OVERLAP_DEFAULT_S,
        description: 'how long the old secret keeps signing next to the new one; 0 stops it at once',
      }),
    ),
  },
  { additionalProperties: false, examples: [{ overlapSeconds: 86400 }] },
);

export const OwnerWebhookPut = Type.Object(
  {
    url: Type.String({
      minLength: 1,
      maxLength: WEBHOOK_URL_CHARS_MAX,
      description: 'https URL on port 443 whose host is a public DNS name (no IP address, no localhost or other special-use name); no query, fragment or credentials',
    }),
    enabled: Type.Optional(Type.Boolean({ default: true, description: 'false keeps the webhook but creates no deliveries (events of the pause are not sent later)' })),
    rotateSecret: Type.Optional(
      Type.Boolean({ default: false, description: 'true: issue a new secret now; the old one stops signing at once (POST /v1/owner/webhook/rotate-secret gives an overlap)' }),
    ),
  },
  { additionalProperties: false, examples: [{ url: 'https://hooks.example.com/acg', enabled: true }] },
);

export const EventParams = Type.Object({ id: idOf('merchant (mer_…)'), eventId: idOf('event (evt_…)') });
export const DeliveryParams = Type.Object({ id: idOf('merchant (mer_…)'), deliveryId: idOf('webhook delivery (whd_…)') });
export const OwnerEventParams = Type.Object({ eventId: idOf('event (evt_…)') });
export const OwnerDeliveryParams = Type.Object({ deliveryId: idOf('webhook delivery (whd_…)') });

const ConfigureWebhookInput = inputOf(MerchantIdParams, WebhookPut);
const ResendDeliveryInput = inputOf(DeliveryParams);
const ResendEventInput = inputOf(EventParams);
const SetWebhookEnabledInput = inputOf(MerchantIdParams, WebhookPatch);
const RotateWebhookSecretInput = inputOf(MerchantIdParams, RotateBody);
const ConfigureOwnerWebhookInput = OwnerWebhookPut;
const DeleteOwnerWebhookInput = Type.Object({}, { additionalProperties: false });
const ResendOwnerDeliveryInput = inputOf(OwnerDeliveryParams);
const ResendOwnerEventInput = inputOf(OwnerEventParams);
const RotateOwnerWebhookSecretInput = RotateBody;

type Result<M extends keyof WebhookService> = ResolvedBy<WebhookService, M>;
type OwnerResult<M extends keyof OwnerWebhookService> = ResolvedBy<OwnerWebhookService, M>;

export interface EventOperations {
  configureMerchantWebhook: SingleStepOperation<Static<typeof ConfigureWebhookInput>, Result<'configure'>>;
  resendWebhookDelivery: SingleStepOperation<Static<typeof ResendDeliveryInput>, { delivery: Delivery }>;
  resendEvent: SingleStepOperation<Static<typeof ResendEventInput>, { delivery: Delivery }>;
  setWebhookEnabled: SingleStepOperation<Static<typeof SetWebhookEnabledInput>, Result<'setEnabled'>>;
  rotateWebhookSecret: SingleStepOperation<Static<typeof RotateWebhookSecretInput>, Result<'rotateSecret'>>;
}

export interface OwnerWebhookOperations {
  configureOwnerWebhook: SingleStepOperation<Static<typeof ConfigureOwnerWebhookInput>, OwnerResult<'configure'>>;
  deleteOwnerWebhook: SingleStepOperation<Static<typeof DeleteOwnerWebhookInput>, OwnerResult<'delete'>>;
  resendOwnerWebhookDelivery: SingleStepOperation<Static<typeof ResendOwnerDeliveryInput>, { delivery: Delivery }>;
  resendOwnerEvent: SingleStepOperation<Static<typeof ResendOwnerEventInput>, { delivery: Delivery }>;
  rotateOwnerWebhookSecret: SingleStepOperation<Static<typeof RotateOwnerWebhookSecretInput>, OwnerResult<'rotateSecret'>>;
}

export function eventOperations(merchants: MerchantDirectory, webhooks: WebhookService): EventOperations {
  return {
    configureMerchantWebhook: {
      name: 'configureMerchantWebhook',
      input: ConfigureWebhookInput,
      idempotency: { key: 'required' },
      secrets: { fields: ['webhookSecret'], replayNotice: WEBHOOK_SECRET_REPLAY_NOTICE },
      run: async (tx, { principal, input }) =>
        // The merchant's row stays locked: concurrent first configurations of one merchant create one endpoint.
        webhooks.configure(tx, await merchants.lockReached(tx, principal, input.id), {
          url: input.url,
          enabled: input.enabled ?? true,
          rotateSecret: input.rotateSecret ?? false,
          deliverMissed: input.deliverMissed ?? true,
        }),
    },
    resendWebhookDelivery: {
      name: 'resendWebhookDelivery',
      input: ResendDeliveryInput,
      idempotency: { key: 'optional' },
      run: async (tx, { principal, input }) => {
        await merchants.reach(tx, principal, input.id);
        return { delivery: await webhooks.resend(tx, { kind: 'merchant', id: input.id }, input.deliveryId) };
      },
    },
    resendEvent: {
      name: 'resendEvent',
      input: ResendEventInput,
      idempotency: { key: 'optional' },
      run: async (tx, { principal, input }) => {
        await merchants.reach(tx, principal, input.id);
        return { delivery: await webhooks.resendEvent(tx, { kind: 'merchant', id: input.id }, input.eventId) };
      },
    },
    setWebhookEnabled: {
      name: 'setWebhookEnabled',
      input: SetWebhookEnabledInput,
      idempotency: { key: 'required' },
      run: async (tx, { principal, input }) => {
        await merchants.reach(tx, principal, input.id);
        return webhooks.setEnabled(tx, input.id, input.enabled, input.deliverMissed ?? true);
      },
    },
    rotateWebhookSecret: {
      name: 'rotateWebhookSecret',
      input: RotateWebhookSecretInput,
      idempotency: { key: 'required' },
      secrets: { fields: ['webhookSecret'], replayNotice: WEBHOOK_SECRET_REPLAY_NOTICE },
      run: async (tx, { principal, input }) => {
        await merchants.reach(tx, principal, input.id);
        return webhooks.rotateSecret(tx, input.id, input.overlapSeconds ?? ROTATION_OVERLAP_DEFAULT_S);
      },
    },
  };
}

/** The owner is the principal's (a human session or an owner token); there is nothing else to authorise. */
export function ownerWebhookOperations(ownerWebhooks: OwnerWebhookService): OwnerWebhookOperations {
  return {
    configureOwnerWebhook: {
      name: 'configureOwnerWebhook',
      input: ConfigureOwnerWebhookInput,
      idempotency: { key: 'required' },
      secrets: { fields: ['webhookSecret'], replayNotice: OWNER_WEBHOOK_SECRET_REPLAY_NOTICE },
      run: (tx, { principal, input }) =>
        ownerWebhooks.configure(tx, principal.ownerId!, { url: input.url, enabled: input.enabled ?? true, rotateSecret: input.rotateSecret ?? false }),
    },
    deleteOwnerWebhook: {
      name: 'deleteOwnerWebhook',
      input: DeleteOwnerWebhookInput,
      idempotency: { key: 'optional' },
      run: (tx, { principal }) => ownerWebhooks.delete(tx, principal.ownerId!),
    },
    resendOwnerWebhookDelivery: {
      name: 'resendOwnerWebhookDelivery',
      input: ResendOwnerDeliveryInput,
      idempotency: { key: 'optional' },
      run: async (tx, { principal, input }) => ({ delivery: await ownerWebhooks.resend(tx, principal.ownerId!, input.deliveryId) }),
    },
    resendOwnerEvent: {
      name: 'resendOwnerEvent',
      input: ResendOwnerEventInput,
      idempotency: { key: 'optional' },
      run: async (tx, { principal, input }) => ({ delivery: await ownerWebhooks.resendEvent(tx, principal.ownerId!, input.eventId) }),
    },
    rotateOwnerWebhookSecret: {
      name: 'rotateOwnerWebhookSecret',
      input: RotateOwnerWebhookSecretInput,
      idempotency: { key: 'required' },
      secrets: { fields: ['webhookSecret'], replayNotice: OWNER_WEBHOOK_SECRET_REPLAY_NOTICE },
      run: (tx, { principal, input }) => ownerWebhooks.rotateSecret(tx, principal.ownerId!, input.overlapSeconds ?? ROTATION_OVERLAP_DEFAULT_S),
    },
  };
}
