// Merchants as every face shows them: one schema each, registered once by the composition root.
import { Type } from '@sinclair/typebox';
import { API_KEY_SCOPES } from '../identity/api-keys.ts';
import { Nullable, UnixSeconds } from '../platform/schemas.ts';
import { VERIFICATION_LABEL } from './service.ts';

export const MerchantSchema = Type.Object(
  {
    id: Type.String(),
    ownerId: Type.String(),
    name: Type.String(),
    domain: Type.String({ description: 'public DNS hostname, IDNA-ASCII, lower case' }),
    verificationChallenge: Type.String({ description: `the exact value of the TXT record to publish at ${VERIFICATION_LABEL}.<domain>` }),
    verified: Type.Boolean(),
    acceptedPaymentMethods: Type.Array(Type.String(), { description: 'how agents pay this merchant; "credits" (gateway credit)' }),
    webhookUrl: Type.String({ description: 'the configured webhook URL; "" while no webhook is configured' }),
    categories: Type.Array(Type.String()),
    createdAt: UnixSeconds('registration'),
    updatedAt: UnixSeconds('last change'),
  },
  { $id: 'Merchant' },
);

export const DnsRecordSchema = Type.Object(
  {
    type: Type.Literal('TXT'),
    name: Type.String({ description: `${VERIFICATION_LABEL}.<domain>` }),
    value: Type.String({ description: 'publish exactly this value (a long value may be split into several strings of one record)' }),
  },
  { $id: 'DnsRecord' },
);

export const ApiKeyMetadataSchema = Type.Object(
  {
    keyId: Type.String(),
    merchantId: Type.String(),
    ownerId: Type.String(),
    name: Type.String(),
    scopes: Type.Array(Type.String({ enum: Object.keys(API_KEY_SCOPES) })),
    createdAt: UnixSeconds('creation'),
    revokedAt: Nullable(UnixSeconds('revocation; null while the key is active')),
  },
  { $id: 'ApiKeyMetadata', description: 'Never contains the secret' },
);

export const MERCHANT_SCHEMAS = [MerchantSchema, DnsRecordSchema, ApiKeyMetadataSchema];
