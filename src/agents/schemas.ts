// Agents as every face shows them: one schema each, registered once by the composition root.
import { Type } from '@sinclair/typebox';
import { Microcredits, Nullable, UnixSeconds } from '../platform/schemas.ts';
import { PROFILE_PRESETS } from './service.ts';

export const ProfileSchema = Type.Object(
  {
    name: Type.String(),
    preset: Type.String({ enum: [...PROFILE_PRESETS] }),
    color: Type.String({ description: 'hex colour #rrggbb' }),
    avatarUrl: Nullable(Type.String({ description: 'where the owner reads the finalized avatar image' })),
  },
  { $id: 'AgentProfile' },
);

const Caps = Type.Object(
  {
    perHoldUc: Nullable(Microcredits('largest single hold; null = no cap')),
    perPeriodUc: Nullable(Microcredits('most that holds may take per period; null = no cap')),
    periodS: Type.Integer({ description: 'length of the cap period in seconds (rolling window)' }),
  },
  { additionalProperties: false },
);

export const AgentSchema = Type.Object(
  {
    id: Type.String(),
    ownerId: Type.String(),
    name: Type.String(),
    status: Type.String({ enum: ['active', 'frozen'] }),
    identity: Type.Object({ issuer: Type.String(), subject: Type.String() }),
    allowedServices: Type.Array(Type.String(), { description: 'service ids the agent may execute; "*" = all' }),
    allowedCategories: Type.Array(Type.String(), { description: 'offer categories the agent may buy; "*" = all' }),
    inboxAllowlist: Type.Array(Type.String(), { description: 'mailboxes the mail service may read' }),
    caps: Caps,
    profile: Type.Ref('AgentProfile'),
    createdAt: UnixSeconds('creation'),
    updatedAt: UnixSeconds('last change'),
  },
  { $id: 'Agent' },
);

export const AGENT_SCHEMAS = [ProfileSchema, AgentSchema];
