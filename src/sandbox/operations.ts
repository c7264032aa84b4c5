// The dev sandbox's operation, for every face: publish a TXT record in the dev DNS zone (the operator's
// `acg dev dns publish`), either a merchant's `_acceptor-verify` proof or any name and value.
import { Type, type Static } from '@sinclair/typebox';
import type { MerchantService } from '../merchants/service.ts';
import { ApiError } from '../platform/errors.ts';
import type { SingleStepOperation } from '../platform/operations.ts';
import { ResourceId } from '../platform/schemas.ts';
import { DEV_TXT_VALUE_BYTES_MAX, publish } from './dev-zone.ts';

export const PublishDevDnsRecordInput = Type.Object(
  {
    merchantId: Type.Optional(ResourceId),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 254, description: 'DNS name, e.g. _acceptor-verify.shop.example.com' })),
    value: Type.Optional(Type.String({ maxLength: DEV_TXT_VALUE_BYTES_MAX, description: 'TXT value, published exactly as given' })),
  },
  {
    additionalProperties: false,
    description: 'Either `merchantId` (publishes that merchant\'s `_acceptor-verify` record) or `name` and `value`.',
    examples: [{ merchantId: 'mer_diat4hyfyy6cjpgmj25d6iegcc' }, { name: '_acceptor-verify.shop.example.com', value: 'acg-domain-verification=…' }],
  },
);
export type PublishDevDnsRecordInput = Static<typeof PublishDevDnsRecordInput>;

export interface TxtRecord {
  type: 'TXT';
  name: string;
  value: string;
}

export interface SandboxOperations {
  publishDevDnsRecord: SingleStepOperation<PublishDevDnsRecordInput, { record: TxtRecord }, void>;
}

/**
 * `resolver`: the DNS-over-HTTPS resolver domains are verified with, and whether it is this gateway's dev zone. A
 * record published in the zone while verification asks another resolver would never be found, so publishing is
 * refused then, saying where to publish instead.
 */
export function sandboxOperations(merchants: MerchantService, nowS: () => number, resolver: () => { url: string; devZone: boolean }): SandboxOperations {
  return {
    publishDevDnsRecord: {
      name: 'publishDevDnsRecord',
      input: PublishDevDnsRecordInput,
      // Publishing the same record twice keeps one: idempotent by itself.
      idempotency: { key: 'none' },
      check: ({ input }) => {
        const byMerchant = input.merchantId !== undefined;
        if (byMerchant === (input.name !== undefined || input.value !== undefined) || (!byMerchant && (input.name === undefined || input.value === undefined))) {
          throw new ApiError('invalid_input', { detail: 'send either merchantId, or name and value' });
        }
        const { url, devZone } = resolver();
        if (!devZone) {
          throw new ApiError('conflict', {
            detail:
              `this gateway verifies domains with the DNS-over-HTTPS resolver ${url} (ACG_DOH_RESOLVER_URL), not its dev zone, so a record ` +
              'published here would never be found: publish the TXT record where that resolver reads it, or unset ACG_DOH_RESOLVER_URL to use the dev zone',
          });
        }
      },
      run: async (tx, { input }) => {
        const { name, value } = input.merchantId !== undefined ? await merchants.dnsRecord(tx, input.merchantId) : { name: input.name!, value: input.value! };
        return { record: await publish(tx, name, value, nowS()) };
      },
    },
  };
}
