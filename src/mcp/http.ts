// The Fastify glue of `POST /mcp`, and the only MCP file that knows Fastify. The route's auth hook
// verifies the credential for the MCP resource before anything else (so discovery and `initialize` are
// never anonymous); then the Host and Origin checks against DNS rebinding; then the body, unparsed, goes
// to the SDK's handler as a web Request, and its Response (JSON, or an SSE stream) comes back as is.
// GET and DELETE answer 405 through the platform's unknown-method rule (`Allow: POST`).
// The SDK (and server.ts, which builds on it) loads on the first request to /mcp, not at start: it is a
// quarter of the gateway's start-up and 27 MB, for an endpoint many gateways never serve.
import { Readable } from 'node:stream';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Type } from '@sinclair/typebox';
import { SCOPE_AGENT, SCOPE_OWNER } from '../platform/access-tokens.ts';
import { undecodedBodyProblem, utf8Text } from '../platform/http/body-as-sent.ts';
import { REPLAY_HEADER } from '../platform/idempotency.ts';
import { jsonRpcError } from '../platform/http/json-rpc.ts';
import { principalOf } from '../platform/http/auth.ts';
import { findJsonShapeProblem } from '../platform/http/json-members.ts';
import { authInfoFor } from './auth.ts';
import { findPrototypeKey, prototypeKeyDetail } from './prototype-keys.ts';
import type { GatewayMcp } from './server.ts';
import { TOOLS, type ToolServices } from './tools.ts';

/**
 * The scopes of the tokens this resource takes, either of which will do, as its 401 challenge names them (the
 * credential verifier's `unauthorized`): an agent token (`svc:agent`) or an owner token (`svc:owner`); a human
 * session carries none. No /mcp refusal is a 403 insufficient_scope: a tool outside a principal's list is an
 * unknown tool (-32602), not a step-up.
 */
const MCP_SCOPE = `${SCOPE_AGENT} ${SCOPE_OWNER}`;

/** Headers that describe this hop's framing, not the message; the web Request gets its own. */
const HOP_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'content-length', 'upgrade']);

const JsonRpcMessage = Type.Object(
  {
    jsonrpc: Type.Literal('2.0'),
    id: Type.Optional(Type.Union([Type.String(), Type.Integer()])),
    method: Type.String({ description: 'e.g. server/discover, initialize, tools/list, tools/call' }),
    params: Type.Optional(Type.Object({}, { additionalProperties: true })),
  },
  { description: 'one JSON-RPC 2.0 request or notification (no batches)' },
);

const JsonRpcResponse = Type.Object(
  {
    jsonrpc: Type.Literal('2.0'),
    id: Type.Union([Type.String(), Type.Integer(), Type.Null()]),
    result: Type.Optional(Type.Object({}, { additionalProperties: true })),
    error: Type.Optional(Type.Object({ code: Type.Integer(), message: Type.String(), data: Type.Optional(Type.Unknown()) })),
  },
  { description: 'the JSON-RPC response' },
);

function toolNames(kind: 'agent' | 'owner'): string {
  return TOOLS.filter((tool) => tool.kinds.includes(kind)).map((tool) => tool.name).join(', ');
}

const DESCRIPTION = [
  'The Model Context Protocol endpoint, stateless. One endpoint serves both eras: MCP 2026-07-28 (every request carries the ' +
    '`_meta` envelope with `io.modelcontextprotocol/protocolVersion` and client capabilities, plus the `MCP-Protocol-Version`, ' +
    '`Mcp-Method` and, for tools/call, `Mcp-Name` headers; `server/discover` describes the server; results carry `resultType` and ' +
    'cache hints) and the legacy 2025-11-25 form (`initialize`, then requests with `MCP-Protocol-Version`; no session id is issued).',
  'The client sends `Accept: application/json, text/event-stream` (on the legacy revisions 406 otherwise; on 2026-07-28 it is not ' +
    'checked, as the official SDK does not check it there) and one JSON message in UTF-8 without a ' +
    'Content-Encoding (415 with -32000 otherwise: a body is read as sent, not decoded), of at most ACG_BODY_LIMIT_BYTES (413 ' +
    'with -32000 otherwise, as the MCP SDK answers). What comes back depends on the era. ' +
    'On 2026-07-28 the answer is one JSON object, or an SSE stream when the server has notifications before the result. ' +
    'On the legacy revisions (2025-11-25 and earlier, and a request naming none) every answer is one server-sent event with 200, ' +
    'a JSON-RPC error of the method included. So an unknown method is 404 with -32601 on 2026-07-28, and 200 with -32601 on the ' +
    'legacy revisions. A notification answers 202 with no body on either.',
  'A message refused before its method runs is a JSON-RPC error in one JSON object on either era: 400 with -32700 a body that ' +
    'is not JSON, -32600 a batch (an array body), -32602 params that are not what the method takes (a `__proto__` key, a ' +
    '`constructor` with a `prototype` or a member name repeated in one object included, as every JSON body refuses them); on ' +
    '2026-07-28 also -32020 header mismatch, -32022 unsupported version and -32602 an invalid envelope (a legacy request naming a ' +
    'revision the server does not speak is 400 with -32000). A refused tool call is a tool result with `isError: true` whose text ' +
    '(and, for a tool without an output schema, structured content) is the problem body the HTTP route of the same operation answers.',
  'Credentials: a human session, or an OAuth access token issued for the resource `{base_url}/mcp` (agent `svc:agent` or owner ' +
    '`svc:owner`); every request needs one, discovery and `initialize` included. Agent identity JWTs, merchant API keys and tokens ' +
    "for the API's audience get 401 with `WWW-Authenticate: Bearer resource_metadata=\"{base_url}/.well-known/oauth-protected-resource/mcp\", " +
    `scope="${MCP_SCOPE}"\`. ` +
    `The tools listed depend on the credential (agents: ${toolNames('agent')}; owners: ${toolNames('owner')}), so list results say ` +
    '`cacheScope: "private"`. Tools that move money take an `idempotencyKey` argument: the same key space as the Idempotency-Key header.',
  'A `Host` or `Origin` header naming another host than the base URL is refused with 403 (DNS rebinding). GET and DELETE answer 405. ' +
    'Refusals of HTTP rather than of a message (401, 403, 405, 429, 503) carry a problem body, as on the API.',
].join('\n\n');

function bearerToken(request: FastifyRequest): string {
  return /^Bearer +(\S+)/i.exec(request.headers.authorization ?? '')?.[1] ?? '';
}

function webHeaders(request: FastifyRequest): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(request.headers)) {
    if (value === undefined || HOP_HEADERS.has(name)) continue;
    for (const item of Array.isArray(value) ? value : [value]) headers.append(name, item);
  }
  return headers;
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The body's text as JSON with the text, or undefined when it is none (the SDK answers that -32700 Parse error). */
function parsedBody(text: string): { message: unknown; text: string } | undefined {
  if (text.length === 0) return undefined;
  try {
    return { message: JSON.parse(text), text };
  } catch {
    return undefined;
  }
}

/**
 * The JSON-RPC error answered here rather than by the SDK, if any: a batch (an array body) is -32600, as the
 * route takes one message and MCP has no batches since 2025-06-18 (the SDK would run a legacy batch); a
 * prototype key or a member name repeated in one object is refused as REST's JSON parser refuses it, -32602 in
 * the params (tool arguments included), -32600 elsewhere in the message; a request whose params are not what its method takes is -32602 Invalid
 * params with the offending members (the SDK answers most of these -32603 Internal error with its schema
 * library's dump, which a client reads as a server fault worth retrying).
 */
/**
 * A JSON-RPC request id as MCP takes it: a string, or an integer (JSON-RPC 2.0 §4: no fractional part) that reads
 * back as sent. An integer past 2^53 − 1 does not: JSON.parse rounds it, and the answer would carry another id than
 * the request's (found from outside: 9007199254740993 came back 9007199254740992), so it is refused as no id.
 */
function isRequestId(id: unknown): boolean {
  return typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id));
}

function refusal(body: { message: unknown; text: string } | undefined, mcp: GatewayMcp, protocolVersion: string | undefined): string | undefined {
  const message = body?.message;
  // A request without the 2026-07-28 envelope whose version names no revision: refused as the SDK refuses a date it
  // does not speak, a transport error with no id. One with the envelope is the SDK's to refuse, as 2026-07-28 has it
  // (UnsupportedProtocolVersionError, with the request's id and the versions in its data).
  const enveloped = isObject(message) && isObject(message.params) && isObject(message.params._meta);
  const unknownRevision = enveloped ? undefined : mcp.unknownRevision(protocolVersion);
  if (unknownRevision !== undefined) return jsonRpcError(null, -32000, unknownRevision);
  if (Array.isArray(message)) return jsonRpcError(null, -32600, 'Invalid Request: JSON-RPC batches are not accepted; send one message per request');
  if (!isObject(message)) return undefined;
  // An id that is no id (MCP: a string or an integer) is not echoed: the answer's id is null, as JSON-RPC 2.0 §5 has
  // it for an id that could not be read (found from outside: `"id": 2.5` came back, breaking the answer's schema).
  if ('id' in message && !isRequestId(message.id) && message.id !== null) {
    return jsonRpcError(null, -32600, 'Invalid Request: id must be a string or an integer of at most 2^53 − 1 (send a larger one as a string)');
  }
  // A notification too (no id: the error's id is null, as a 400 to a notification may carry, MCP Streamable HTTP).
  // `params` itself too (a message too deep there names at most its member: found from outside, -32600).
  const malformed = (path: string, detail: string) =>
    path === 'params' || path.startsWith('params.') || path.startsWith('params[')
      ? jsonRpcError(message.id, -32602, `Invalid params for ${String(message.method)}: ${detail}`)
      : jsonRpcError(message.id, -32600, `Invalid Request: ${detail}`);
  const prototypeKey = findPrototypeKey(message);
  if (prototypeKey !== undefined) return malformed(prototypeKey, prototypeKeyDetail(prototypeKey));
  // A nesting too deep is named by the tool's argument (params.arguments.x), as a schema refusal names it.
  const shape = findJsonShapeProblem(body!.text, '', 'dotted', 3);
  if (shape !== undefined) return malformed(shape.path, shape.detail);
  // Not a JSON-RPC 2.0 request at all: the SDK answers -32600 Invalid Request, before any params are read.
  if (!('id' in message) || message.jsonrpc !== '2.0') return undefined;
  const invalid = mcp.invalidParams(message, protocolVersion);
  return invalid === undefined ? undefined : jsonRpcError(message.id, -32602, invalid);
}

export function mcpRoutes(services: ToolServices) {
  return async function routes(app: FastifyInstance): Promise<void> {
    const { config } = app.gateway;
    let loading: Promise<GatewayMcp> | undefined;
    const mcp = (): Promise<GatewayMcp> =>
      (loading ??= import('./server.ts').then(
        (module) => module.gatewayMcp(services, { maxRequestBodySize: config.bodyLimitBytes, baseUrl: config.baseUrl }),
        (error: unknown) => {
          loading = undefined;
          throw error;
        },
      ));
    app.addHook('onClose', async () => {
      if (loading) await (await loading).handler.close();
    });
    // The SDK reads the body itself (its parse errors are JSON-RPC errors), so this scope keeps it raw.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));

    app.post('/mcp', {
      config: {
        auth: { kinds: ['human', 'agent', 'owner'], resource: 'mcp' },
        notAnOperation: 'the MCP face: each tool call runs its operation or query',
        // The SDK sends it with an SSE stream, so that a proxy (nginx) passes each event on as it comes.
        responseHeaders: {
          200: {
            'X-Accel-Buffering': { type: 'string', description: '`no`, with an SSE stream: a proxy must not buffer it' },
            // As on an API route; a stream's headers leave before its tool has answered, so only the log line says it there.
            'Idempotent-Replayed': {
              type: 'string',
              description: '`true`, on a JSON answer whose tool call answered the stored outcome of an earlier call with its `idempotencyKey`',
            },
          },
        },
      },
      schema: {
        operationId: 'postMcp',
        tags: ['mcp'],
        summary: 'Model Context Protocol endpoint (2026-07-28 and legacy 2025-11-25)',
        description: DESCRIPTION,
        body: JsonRpcMessage,
        response: {
          200: {
            description:
              'the JSON-RPC response: on 2026-07-28 one JSON object, or an SSE stream ending with it; on the legacy revisions always ' +
              'one server-sent event, a JSON-RPC error of the method (-32601 unknown method included) too',
            content: { 'application/json': { schema: JsonRpcResponse }, 'text/event-stream': { schema: Type.String() } },
          },
          202: Type.Null({ description: 'a notification was accepted' }),
          400: {
            description: 'a JSON-RPC error, on either era (not JSON, a batch, invalid params; on 2026-07-28 header mismatch, unsupported version, invalid envelope)',
            content: { 'application/json': { schema: JsonRpcResponse } },
          },
          404: {
            description: 'on 2026-07-28 only: a JSON-RPC error, unknown method (-32601); a legacy revision answers it 200 in one server-sent event',
            content: { 'application/json': { schema: JsonRpcResponse } },
          },
          406: { description: 'on the legacy revisions only: a JSON-RPC error (-32000), the Accept header does not list both application/json and text/event-stream', content: { 'application/json': { schema: JsonRpcResponse } } },
          413: {
            description: 'a JSON-RPC error (-32000): the body is over the size limit (ACG_BODY_LIMIT_BYTES, 262,144 bytes by default); nothing ran',
            content: { 'application/json': { schema: JsonRpcResponse } },
          },
          415: {
            description: 'a JSON-RPC error (-32000): a body that is not application/json, or one to decode (a Content-Encoding, a charset other than UTF-8)',
            content: { 'application/json': { schema: JsonRpcResponse } },
          },
        },
      },
      // The body is documented above but checked by the SDK, which answers JSON-RPC errors, not problems.
      validatorCompiler: () => () => true,
      handler: async (request, reply: FastifyReply) => {
        const gatewayMcp = await mcp();
        gatewayMcp.checkHostAndOrigin(request.headers.host, request.headers.origin);
        const aborted = new AbortController();
        reply.raw.on('close', () => aborted.abort());
        // A body is read as it was sent (platform/http/body-as-sent.ts); refused as the SDK refuses a body that is not JSON.
        const undecoded = undecodedBodyProblem(request.headers, 'JSON');
        if (undecoded) {
          return reply.code(415).header('cache-control', 'no-store').type('application/json').send(jsonRpcError(null, -32000, `Unsupported Media Type: ${undecoded}`));
        }
        const body = request.body as Buffer | undefined;
        // Read strictly, as the API reads a JSON body: bytes that are not UTF-8 were read with U+FFFD in their place,
        // and a tool wrote them (found from outside: an agent named "bad\uFFFD\uFFFD").
        const text = body && body.length > 0 ? utf8Text(body) : '';
        if (text === undefined) return reply.code(400).header('cache-control', 'no-store').type('application/json').send(jsonRpcError(null, -32700, 'Parse error: the body is not valid UTF-8 (JSON is UTF-8)'));
        const refused = refusal(parsedBody(text), gatewayMcp, request.headers['mcp-protocol-version'] as string | undefined);
        if (refused) return reply.code(400).header('cache-control', 'no-store').type('application/json').send(refused);
        const webRequest = new Request(new URL(request.url, config.baseUrl), {
          method: 'POST',
          headers: webHeaders(request),
          body: body && body.length > 0 ? new Uint8Array(body) : undefined,
          signal: aborted.signal,
        });
        const principal = principalOf(request);
        const facts = { delegating: principal.kind === 'agent' && (await services.mayDelegate(principal.agentId!)) };
        const notes = {
          replayed() {
            request.idempotentReplay = true;
            if (!reply.raw.headersSent) reply.header(REPLAY_HEADER, 'true');
          },
        };
        const response = await gatewayMcp.handler.fetch(webRequest, { authInfo: authInfoFor(principal, bearerToken(request), facts, notes) });
        reply.code(response.status);
        response.headers.forEach((value, name) => void reply.header(name, value));
        if (!response.body) return reply.send();
        return reply.send(Readable.fromWeb(response.body as NodeReadableStream<Uint8Array>));
      },
    });
  };
}
