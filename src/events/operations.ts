// The webhook lifecycle operations, for every face: re-send a past event, pause or resume the webhook,
// rotate its secret. Who may act for the merchant is the merchants service's rule, asked inside the
// operation's transaction.
import { Type, type Static } from '@sinclair/typebox';
import { merchantActor, type MerchantService } from '../merchants/service.ts';
import { idOf, MerchantIdParams } from '../platform/schemas.ts';
import { inputOf, type SingleStepOperation, type ResolvedBy } from '../platform/operations.ts';
import { ROTATION_OVERLAP_DEFAULT_S, ROTATION_OVERLAP_MAX_S, type WebhookService } from './service.ts';

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

export const EventParams = Type.Object({ id: idOf('merchant (mer_…)'), eventId: idOf('event (evt_…)') });

const ResendEventInput = inputOf(EventParams);
const SetWebhookEnabledInput = inputOf(MerchantIdParams, WebhookPatch);
const RotateWebhookSecretInput = inputOf(MerchantIdParams, RotateBody);

type Result<M extends keyof WebhookService> = ResolvedBy<WebhookService, M>;

export interface EventOperations {
  resendEvent: SingleStepOperation<Static<typeof ResendEventInput>, { delivery: Result<'resendEvent'> }>;
  setWebhookEnabled: SingleStepOperation<Static<typeof SetWebhookEnabledInput>, Result<'setEnabled'>>;
  rotateWebhookSecret: SingleStepOperation<Static<typeof RotateWebhookSecretInput>, Result<'rotateSecret'>>;
}

export function eventOperations(merchants: MerchantService, webhooks: WebhookService): EventOperations {
  return {
    resendEvent: {
      name: 'resendEvent',
      input: ResendEventInput,
      idempotency: { key: 'optional' },
      run: async (tx, { principal, input }) => {
        await merchants.facts(tx, merchantActor(principal), input.id);
        return { delivery: await webhooks.resendEvent(tx, input.id, input.eventId) };
      },
    },
    setWebhookEnabled: {
      name: 'setWebhookEnabled',
      input: SetWebhookEnabledInput,
      idempotency: { key: 'required' },
      run: async (tx, { principal, input }) => {
        await merchants.facts(tx, merchantActor(principal), input.id);
        return webhooks.setEnabled(tx, input.id, input.enabled, input.deliverMissed ?? true);
      },
    },
    rotateWebhookSecret: {
      name: 'rotateWebhookSecret',
      input: RotateWebhookSecretInput,
      idempotency: { key: 'required' },
      secretFields: ['webhookSecret'],
      run: async (tx, { principal, input }) => {
        await merchants.facts(tx, merchantActor(principal), input.id);
        return webhooks.rotateSecret(tx, input.id, input.overlapSeconds ?? ROTATION_OVERLAP_DEFAULT_S);
      },
    },
  };
}
