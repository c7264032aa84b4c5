// An owner's webhook: one endpoint per owner that receives the events of its agents' top-ups and retained
// intents (OWNER_EVENT_TYPES), signed with Standard Webhooks and delivered by the same outbox, worker,
// retry schedule and circuit as merchants' webhooks (service.ts). An owner has no verified domain, so the
// URL rule is the merchant rule without the domain anchor: https on port 443 to a public DNS name, checked
// again against every resolved address at delivery.
import type { Queryable, Tx } from '../platform/db/database.ts';
import { memberRefusal } from '../platform/errors.ts';
import type { Delivery, OwnerWebhookConfiguration, WebhookService } from './service.ts';
import { validatePublicWebhookUrl } from './webhook-url.ts';

export const OWNER_WEBHOOK_SECRET_NOTICE =
  'Store this signing secret now: it is shown only in this response (a replay omits it). It stays until you replace it ' +
  '(POST /v1/owner/webhook/rotate-secret keeps the old one signing during an overlap; PUT with rotateSecret: true replaces it at once). Verify deliveries with a Standard Webhooks library (webhook-id, ' +
  'webhook-timestamp, webhook-signature).';
/** A replay's notice: the secret it leaves out was shown once (SecretMembers). */
export const OWNER_WEBHOOK_SECRET_REPLAY_NOTICE =
  'The signing secret was shown once, in the first answer to this request, and is not repeated. If it was lost, replace it ' +
  '(POST /v1/owner/webhook/rotate-secret, or PUT /v1/owner/webhook with rotateSecret: true).';
export const OWNER_WEBHOOK_SECRET_KEPT_NOTICE =
  'The signing secret is unchanged (no webhookSecret in this response). Rotate it with POST /v1/owner/webhook/rotate-secret.';

export interface OwnerWebhookInput {
  url: string;
  enabled: boolean;
  rotateSecret: boolean;
}

export class OwnerWebhookService {
  constructor(private readonly webhooks: WebhookService) {}

  async configure(tx: Tx, ownerId: string, input: OwnerWebhookInput): Promise<{ configuration: OwnerWebhookConfiguration; webhookSecret?: string; notice: string }> {
    const url = validatePublicWebhookUrl(input.url);
    if (!url.ok) throw memberRefusal('url', url.reason);
    const configured = await this.webhooks.configureOwner(tx, ownerId, { ...input, url: url.url });
    return { ...configured, notice: configured.webhookSecret === undefined ? OWNER_WEBHOOK_SECRET_KEPT_NOTICE : OWNER_WEBHOOK_SECRET_NOTICE };
  }

  async configuration(db: Queryable, ownerId: string): Promise<{ configuration: OwnerWebhookConfiguration }> {
    return { configuration: await this.webhooks.ownerConfiguration(db, ownerId) };
  }

  /** A new secret, returned once; the replaced one signs beside it for `overlapS` seconds (WebhookService.rotateSecret). */
  rotateSecret(tx: Tx, ownerId: string, overlapS: number): Promise<{ configuration: OwnerWebhookConfiguration; webhookSecret: string }> {
    return this.webhooks.rotateOwnerSecret(tx, ownerId, overlapS);
  }

  /** Deleting an absent webhook answers the same unconfigured state (`deleted: false`). */
  async delete(tx: Queryable, ownerId: string): Promise<{ configuration: OwnerWebhookConfiguration; deleted: boolean }> {
    return this.webhooks.deleteOwner(tx, ownerId);
  }

  /** A delivery of the owner's made due now (a dead one too), as a merchant's re-send does. */
  resend(tx: Tx, ownerId: string, deliveryId: string): Promise<Delivery> {
    return this.webhooks.resend(tx, { kind: 'owner', id: ownerId }, deliveryId);
  }

  /** Any kept event of the owner's delivered again, or for the first time (it happened while the webhook was paused). */
  resendEvent(tx: Tx, ownerId: string, eventId: string): Promise<Delivery> {
    return this.webhooks.resendEvent(tx, { kind: 'owner', id: ownerId }, eventId);
  }
}
