// The owner-webhook operations, for every face: configure (PUT) and delete. The owner is the principal's
// (a human session or an owner token); there is nothing else to authorise.
import { Type, type Static } from '@sinclair/typebox';
import type { SingleStepOperation, ResolvedBy } from '../platform/operations.ts';
import { WEBHOOK_URL_CHARS_MAX } from '../merchants/validation.ts';
import type { OwnerWebhookService } from './service.ts';

export const OwnerWebhookPut = Type.Object(
  {
    url: Type.String({
      minLength: 1,
      maxLength: WEBHOOK_URL_CHARS_MAX,
      description: 'https URL on port 443 whose host is a public DNS name (no IP address, no localhost or other special-use name); no query, fragment or credentials',
    }),
    enabled: Type.Optional(Type.Boolean({ default: true, description: 'false keeps the webhook but creates no deliveries (events of the pause are not sent later)' })),
    rotateSecret: Type.Optional(Type.Boolean({ default: false, description: 'true: issue a new secret now; the old one stops signing at once' })),
  },
  { additionalProperties: false, examples: [{ url: 'https://hooks.example.com/acg', enabled: true }] },
);

const ConfigureOwnerWebhookInput = OwnerWebhookPut;
const DeleteOwnerWebhookInput = Type.Object({}, { additionalProperties: false });

type Result<M extends keyof OwnerWebhookService> = ResolvedBy<OwnerWebhookService, M>;

export interface OwnerWebhookOperations {
  configureOwnerWebhook: SingleStepOperation<Static<typeof ConfigureOwnerWebhookInput>, Result<'configure'>>;
  deleteOwnerWebhook: SingleStepOperation<Static<typeof DeleteOwnerWebhookInput>, Result<'delete'>>;
}

export function ownerWebhookOperations(ownerWebhooks: OwnerWebhookService): OwnerWebhookOperations {
  return {
    configureOwnerWebhook: {
      name: 'configureOwnerWebhook',
      input: ConfigureOwnerWebhookInput,
      idempotency: { key: 'required' },
      secretFields: ['webhookSecret'],
      run: (tx, { principal, input }) =>
        ownerWebhooks.configure(tx, principal.ownerId!, { url: input.url, enabled: input.enabled ?? true, rotateSecret: input.rotateSecret ?? false }),
    },
    deleteOwnerWebhook: {
      name: 'deleteOwnerWebhook',
      input: DeleteOwnerWebhookInput,
      idempotency: { key: 'optional' },
      run: (tx, { principal }) => ownerWebhooks.delete(tx, principal.ownerId!),
    },
  };
}
