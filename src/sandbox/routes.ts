// Dev mode only: the dev DNS zone over DNS-over-HTTPS (RFC 8484, GET and POST) at /dev/dns-query, and the
// operator route that publishes its TXT records (`acg dev dns publish`). Live mode registers none of it,
// so the paths are 404 there.
import type { FastifyInstance } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import type { DohOptions } from '../merchants/doh.ts';
import type { MerchantService } from '../merchants/service.ts';
import { checkOperator } from '../operator/credential.ts';
import { DEV_ZONE_PATH } from '../platform/config.ts';
import { ApiError } from '../platform/errors.ts';
import { serve } from '../platform/http/operation.ts';
import { problems } from '../platform/http/openapi.ts';
import { OPERATOR_PRINCIPAL } from '../platform/principal.ts';
import { answer } from './dev-zone.ts';
import { PublishDevDnsRecordInput, sandboxOperations } from './operations.ts';

const DNS_MESSAGE = 'application/dns-message';
/** A query's answer, as the OpenAPI document describes it: the DNS message itself, not JSON. */
const DNS_ANSWER = { description: 'the DNS answer (RFC 8484), as a DNS message', content: { [DNS_MESSAGE]: { schema: { type: 'string', format: 'binary' } } } };
/** The largest DNS message (RFC 8484 §6: a DoH message is at most 65535 bytes). */
const DNS_MESSAGE_BYTES_MAX = 65_535;

const DnsQuery = Type.Object(
  // A request line and its headers fit in 16 KiB (431 beyond), so a GET carries at most this much of a query (found
  // from outside: the 87,382 of a whole 64 KiB message could never arrive); a longer one is POSTed.
  { dns: Type.String({ minLength: 1, maxLength: 16_000, pattern: '^[A-Za-z0-9_-]+$', description: 'the DNS query, base64url without padding (a longer query: POST it as application/dns-message)' }) },
  { additionalProperties: false },
);

const TxtRecordSchema = Type.Object({ type: Type.Literal('TXT'), name: Type.String(), value: Type.String() });

/** How this process reaches its own listening socket (a wildcard address is reached on loopback). */
function ownUrl(app: FastifyInstance): string | undefined {
  const address = app.server.address();
  if (typeof address !== 'object' || address === null) return undefined;
  const host = address.address === '0.0.0.0' ? '127.0.0.1' : address.address === '::' ? '::1' : address.address;
  return `http://${host.includes(':') ? `[${host}]` : host}:${address.port}`;
}

/**
 * `doh`: the resolver options the merchants service verifies with. When they name the dev zone, the
 * zone is asked at the address the gateway actually listens on (PORT=0 picks it at start-up).
 */
export function sandboxRoutes(deps: { merchants: MerchantService; operatorHash: string | undefined; doh: DohOptions }) {
  return async function routes(app: FastifyInstance): Promise<void> {
    const { db, clock, config } = app.gateway;
    if (config.mode !== 'dev') return;
    const tags = ['dev'];
    if (deps.doh.devZoneCleartext) {
      app.addHook('onListen', async () => {
        const url = ownUrl(app);
        if (url) deps.doh.resolverUrl = `${url}${DEV_ZONE_PATH}`;
      });
    }

    app.addContentTypeParser(DNS_MESSAGE, { parseAs: 'buffer', bodyLimit: DNS_MESSAGE_BYTES_MAX }, (_request, body, done) => done(null, body));

    const respond = async (message: Buffer) => {
      const reply = await answer(db, message);
      if (!reply) throw new ApiError('invalid_input', { detail: 'the body is not a DNS message' });
      return reply;
    };
    const description =
      'RFC 8484 DNS-over-HTTPS endpoint of the dev DNS zone: authoritative for every name, answering the TXT records published ' +
      'with `acg dev dns publish` (TTL 0) and NXDOMAIN elsewhere. Dev mode uses it as its resolver unless ACG_DOH_RESOLVER_URL is set; ' +
      'live mode has no such route. Plain HTTP on the gateway\'s own address: the one resolver the DoH client reaches without TLS.';

    app.get(DEV_ZONE_PATH, {
      schema: { operationId: 'queryDevDnsZone', tags, summary: 'Dev mode: DNS-over-HTTPS query (GET, ?dns=)', description, querystring: DnsQuery, response: { 200: DNS_ANSWER, ...problems(400) } },
      handler: async (request, reply) => {
        const message = Buffer.from((request.query as Static<typeof DnsQuery>).dns, 'base64url');
        return reply.type(DNS_MESSAGE).header('cache-control', 'no-store').send(await respond(message));
      },
    });

    app.post(DEV_ZONE_PATH, {
      config: { notAnOperation: 'a DNS query (RFC 8484 POST form): reads the dev zone', rawBody: { mediaType: DNS_MESSAGE, description: 'the DNS query, a DNS message in wire format (RFC 1035 §4), as RFC 8484 §4.1 sends it' } },
      schema: { operationId: 'postDevDnsZoneQuery', tags, summary: 'Dev mode: DNS-over-HTTPS query (POST, application/dns-message)', description, response: { 200: DNS_ANSWER, ...problems(400, 415) } },
      handler: async (request, reply) => {
        if (!Buffer.isBuffer(request.body)) throw new ApiError('unsupported_media_type', { detail: `send the DNS query as ${DNS_MESSAGE}` });
        return reply.type(DNS_MESSAGE).header('cache-control', 'no-store').send(await respond(request.body));
      },
    });

    const { publishDevDnsRecord } = sandboxOperations(deps.merchants, () => clock.nowS(), () => ({ url: deps.doh.resolverUrl, devZone: deps.doh.devZoneCleartext === true }));
    app.post('/dev/dns/records', {
      config: { operation: publishDevDnsRecord },
      onRequest: async (request) => {
        checkOperator(request.headers.authorization, deps.operatorHash);
        request.principal = OPERATOR_PRINCIPAL;
      },
      schema: {
        tags,
        summary: 'Dev mode: publish a TXT record in the dev DNS zone (operator)',
        description:
          'Adds a TXT record (publishing the same record twice keeps one). With `merchantId`, the record is that merchant\'s ' +
          '`_acceptor-verify` proof, so `POST /v1/merchants/{id}/verify-domain` then finds it. What `acg dev dns publish` sends. ' +
          '409 conflict when ACG_DOH_RESOLVER_URL names another resolver: verification would never read the dev zone. ' +
          'Authentication: the operator credential (ACG_DATA_DIR/operator-token).',
        security: [{ operator: [] }],
        body: PublishDevDnsRecordInput,
        response: { 200: Type.Object({ record: TxtRecordSchema }), ...problems(400, 401, 404, 409) },
      },
      handler: (request, reply) => serve(request, reply, publishDevDnsRecord, request.body as PublishDevDnsRecordInput),
    });
  };
}
