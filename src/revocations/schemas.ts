// The kill switch's resources as every face shows them: the freeze report, the `voucher.revoked` event's
// revocation, and one entry of a merchant's revocations feed. Registered once by the composition root.
import { Type } from '@sinclair/typebox';
import { AgentSchema } from '../agents/schemas.ts';
import { EVENT_REACHES } from '../events/service.ts';
import { Microcredits, Nullable, UnixSeconds } from '../platform/schemas.ts';
import { REVOCATION_REASONS } from './service.ts';

const Reason = Type.String({
  enum: [...REVOCATION_REASONS],
  description: '`agent_frozen`: the owner froze the agent (or one of its ancestors) with releaseHolds; `agent_retired`: the owner retired the delegate (or one of its ancestors)',
});
const Cursor = Type.String({ description: 'opaque position in the feed: pass it back as `since`' });

export const VoucherRevocationSchema = Type.Object(
  {
    agentId: Type.String({ description: 'the agent the owner froze or retired; the holds are its own or its delegates\'' }),
    reason: Reason,
    holdIds: Type.Array(Type.String(), { description: 'your holds released by this freeze or retirement: each is the `jti` of a voucher to refuse from now on' }),
    revokedAt: UnixSeconds('the vouchers were revoked'),
  },
  {
    $id: 'VoucherRevocation',
    description: 'Vouchers the gateway withdrew: their holds are released and their credit is back with the agent; a capture of one answers 409 voucher_revoked.',
    examples: [{ agentId: 'agt_at4q454gyb3q7w6hrpdldhrdgi', reason: 'agent_frozen', holdIds: ['hold_hyrtyeevt7ynuzhx23uqkhsaoy'], revokedAt: 1764000000 }],
  },
);

export const FreezeMerchantSchema = Type.Object(
  {
    merchantId: Type.String(),
    holdIds: Type.Array(Type.String(), { description: "the merchant's holds this freeze revoked" }),
    eventId: Type.String({ description: 'the `voucher.revoked` event that told the merchant (also its webhook-id)' }),
    webhook: Type.String({
      enum: [...EVENT_REACHES],
      description:
        'where that event stands now: `delivered` (the webhook answered 2xx), `pending` (queued, not yet attempted), `failing` ' +
        '(attempted without a 2xx: retrying, or dead-lettered after the last retry), `disabled` (the gateway gave up on the ' +
        'webhook), `paused` (the merchant paused its webhook: nothing is sent while it is paused; a delivery already made goes on when it resumes, and an event without one is sent if it resumes with deliverMissed), `none` (the ' +
        'merchant had no webhook: only the revocations feed and capture refusals tell it)',
    }),
    lastAttemptAt: Nullable(UnixSeconds('the last delivery attempt of the event; null before the first')),
    nextAttemptAt: Nullable(
      UnixSeconds(
        "when the next delivery attempt of the event is due, while its delivery is pending (`pending`, or `failing` and retrying), as a " +
          "WebhookDelivery's `nextAttemptAt`: its schedule's time, or the end of the merchant's open circuit when that is later (no attempt " +
          'goes to the webhook before it), rounded up to the second; null once delivered or dead-lettered, while the webhook is paused or ' +
          'disabled (no attempt is due until it is enabled again), and without a delivery',
      ),
    ),
  },
  { $id: 'FreezeMerchant' },
);

export const FreezeReportSchema = Type.Object(
  {
    id: Type.String({ description: 'frz_…' }),
    agentId: Type.String(),
    frozenAt: UnixSeconds('this freeze ran: for a second freeze of an agent already frozen (to release its holds), that second one, not when the agent stopped spending'),
    releaseHolds: Type.Boolean({ description: 'whether this freeze released the outstanding holds of the subtree' }),
    releasedHolds: Type.Integer({ minimum: 0, description: 'holds released and revoked, of the agent and its delegates (built-in service holds included)' }),
    releasedUc: Microcredits('credit those holds gave back to the agents\' lots'),
    merchants: Type.Array(Type.Ref('FreezeMerchant'), { description: 'each merchant that held a revoked voucher, with its event\'s delivery state now' }),
  },
  {
    $id: 'FreezeReport',
    description: 'How far a freeze reached: what it released, and which merchants were told, and whether the telling arrived.',
  },
);

export const RevocationSchema = Type.Object(
  {
    holdId: Type.String({ description: 'the revoked hold: the `jti` of the voucher to refuse' }),
    agentId: Type.String({ description: 'the agent the owner froze or retired (as in the `voucher.revoked` event)' }),
    reason: Reason,
    revokedAt: UnixSeconds('revoked'),
    cursor: Cursor,
  },
  { $id: 'Revocation' },
);

/** The freeze's answer: the Agent as before (a client of the freeze route before `releaseHolds` reads the same fields), plus the report. */
export const FrozenAgentSchema = Type.Object(
  { ...AgentSchema.properties, freeze: Type.Ref('FreezeReport') },
  { $id: 'FrozenAgent', description: 'The frozen agent, as every agent route shows it, with `freeze`: how far this freeze reached.' },
);

export const REVOCATION_SCHEMAS = [VoucherRevocationSchema, FreezeMerchantSchema, FreezeReportSchema, RevocationSchema, FrozenAgentSchema];
