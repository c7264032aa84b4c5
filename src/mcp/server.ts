// The MCP face: one stateless handler for both protocol eras (2026-07-28 per-request envelopes and the
// legacy 2025-11-25 `initialize` form). Each request gets a fresh McpServer holding the tools its
// verified principal may call, so a tool list depends on who asks (cache scope `private`). A tool that
// changes state runs its operation through the operation runner, a read its query through the query
// runner, as their HTTP routes do; a read's output schema is the query's. A business refusal comes back
// as a tool error (`isError`) whose text (and, for a tool without an output schema, structured content) is the
// problem body the HTTP route answers (with `retryAfterS` as a member, since a tool result has no headers), except a refusal a human resolves in a
// browser (an ApiError carrying an `approval` page): that becomes a URL elicitation (see `askToVisit`).
import { GATEWAY_VERSION } from '../platform/version.ts';
import {
  createMcpHandler,
  fromJsonSchema,
  inputRequired,
  McpServer,
  specTypeSchemas,
  SUPPORTED_PROTOCOL_VERSIONS,
  UrlElicitationRequiredError,
  type CallToolResult,
  type InputRequiredResult,
  type JsonSchemaType,
  type McpHttpHandler,
  type ServerContext,
  validateHostHeader,
  validateOriginHeader,
} from '@modelcontextprotocol/server';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { ApiError, memberRefusal, pathUnder, problemBody, unexpectedAsApiError, type HumanApproval } from '../platform/errors.ts';
import { describeViolations } from '../platform/http/render-error.ts';
import { findUnstorableText, unstorableTextRefusal } from '../platform/http/text-guard.ts';
import { IDEMPOTENCY_KEY_PATTERN, RELEASE_KEY_PATTERN } from '../platform/idempotency.ts';
import { replayedRefusal, runOperation } from '../platform/operations.ts';
import type { Principal, PrincipalKind } from '../platform/principal.ts';
import { runQuery, type Query } from '../platform/queries.ts';
import { activeSpan, inSpan, remoteParent, setSpanAttributes, type SpanOptions, type SpanRef } from '../platform/telemetry.ts';
import { callerFactsFrom, exchangeNotesFrom, principalFrom, type CallerFacts, type ExchangeNotes } from './auth.ts';
import { isPurchaseApprovalId } from '../payments/purchases.ts';
import { publishedInputJson, shownTo, type JsonSchema } from './published-schema.ts';
import { TOOLS, type QueryToolDefinition, type ToolDefinition, type ToolServices } from './tools.ts';

const MCP_SERVER_INFO = { name: 'agent-credit-gateway', version: GATEWAY_VERSION };

const INSTRUCTIONS =
  'Agent Credit Gateway: agents pay for services with prepaid credit. Amounts are microcredits as decimal strings ' +
  '(1 credit = 1,000,000 µc = $0.01). Tools that move money take an idempotencyKey: retry a failed call with the same key. ' +
  'A refused call is a tool error whose text is an RFC 9457 problem (JSON) with a stable `code`.';

/**
 * A copy of `schema` with every `$ref` to a named schema replaced by that schema, without its `$id` (tools
 * carry no definitions, and one validator holds every tool's schemas, so an id may appear only once).
 */
function inlined(schema: unknown, named: ReadonlyMap<string, unknown>): unknown {
  if (Array.isArray(schema)) return schema.map((item) => inlined(item, named));
  if (schema === null || typeof schema !== 'object') return schema;
  const ref = (schema as { $ref?: unknown }).$ref;
  if (typeof ref === 'string' && named.has(ref)) return inlined(named.get(ref), named);
  return Object.fromEntries(Object.entries(schema).filter(([name]) => name !== '$id').map(([name, value]) => [name, inlined(value, named)]));
}

function namedSchemas(services: Pick<ToolServices, 'schemas'>): Map<string, unknown> {
  return new Map(services.schemas.map((schema) => [schema.$id!, schema]));
}

/** Adds a member to every object shape of `schema`, down its oneOf/anyOf/allOf branches (each may be closed). */
function withMember(schema: JsonSchema, name: string, member: object): void {
  for (const keyword of ['oneOf', 'anyOf', 'allOf']) {
    for (const branch of (schema[keyword] as JsonSchema[] | undefined) ?? []) withMember(branch, name, member);
  }
  if (schema.properties || schema.additionalProperties === false) schema.properties = { ...schema.properties, [name]: member };
}

/**
 * A tool's input as JSON Schema: the query's or the operation's TypeBox definition (already JSON Schema),
 * plus `idempotencyKey` for an operation that honours one.
 */
function toolInputJson(tool: ToolDefinition, services: Pick<ToolServices, 'operations' | 'queries'>, named: ReadonlyMap<string, unknown>, keyRequired = true): JsonSchema {
  if ('query' in tool) return inlined(JSON.parse(JSON.stringify(services.queries[tool.query].input)), named) as JsonSchema;
  const operation = services.operations[tool.operation];
  const schema = inlined(JSON.parse(JSON.stringify(operation.input)), named) as JsonSchema;
  const { key, rule } = operation.idempotency;
  if (key === 'none') return schema;
  const pattern = rule === 'release' ? RELEASE_KEY_PATTERN : IDEMPOTENCY_KEY_PATTERN;
  withMember(schema, 'idempotencyKey', {
    type: 'string',
    pattern: pattern.source,
    description: 'a fresh unique key per intended operation (a UUID is good); a retry of the same operation MUST reuse it, so it happens once',
  });
  if (key === 'required' && keyRequired) schema.required = [...(schema.required ?? []), 'idempotencyKey'];
  withExampleMember(schema, 'idempotencyKey', EXAMPLE_IDEMPOTENCY_KEY);
  return schema;
}

const EXAMPLE_IDEMPOTENCY_KEY = '5f0c6a1e-2b7d-4c8e-9a3f-1d2e3f4a5b6c';

/** Adds a member to every example object of `schema` and its branches, so each example is a valid call of the tool. */
function withExampleMember(schema: JsonSchema, name: string, value: unknown): void {
  for (const keyword of ['oneOf', 'anyOf', 'allOf']) {
    for (const branch of (schema[keyword] as JsonSchema[] | undefined) ?? []) withExampleMember(branch, name, value);
  }
  if (Array.isArray(schema.examples)) {
    schema.examples = schema.examples.map((example) => (example !== null && typeof example === 'object' && !Array.isArray(example) ? { ...example, [name]: value } : example));
  }
}

/** A read's output schema: the query's (the HTTP route's 200). Operations declare none. */
function toolOutputJson(tool: ToolDefinition, services: Pick<ToolServices, 'queries' | 'purchaseApprovals'>, named: ReadonlyMap<string, unknown>): JsonSchema | undefined {
  if (!('query' in tool)) return undefined;
  const output = inlined(JSON.parse(JSON.stringify(services.queries[tool.query].output)), named) as JsonSchema;
  if (!tool.readsPurchaseApprovals) return output;
  // get_intent answers a retained intent or a purchase approval: either route's 200 (an object, as MCP wants).
  const purchase = inlined(JSON.parse(JSON.stringify(services.purchaseApprovals.output)), named) as JsonSchema;
  return { type: 'object', anyOf: [output, purchase] };
}

/** The query a read tool runs for these arguments: get_intent given a purchase approval's id reads that approval. */
function queryOf(services: ToolServices, tool: QueryToolDefinition, args: Record<string, unknown>): Query<unknown, object, unknown> {
  const purchase = tool.readsPurchaseApprovals && typeof args.id === 'string' && isPurchaseApprovalId(args.id) ? services.purchaseApprovals : undefined;
  return (purchase ?? services.queries[tool.query]) as Query<unknown, object, unknown>;
}

/**
 * Tool arguments are a request body that reaches the services by another road (the route keeps /mcp's body
 * raw, which the platform's text guard skips): the same rule refuses the same text, with the same code.
 */
function refuseUnstorableText(args: Record<string, unknown>): void {
  const path = findUnstorableText(args, 'arguments');
  if (path === undefined) return;
  throw unstorableTextRefusal(path);
}

/** A tool's answer, and whether it is the stored answer of an earlier call with its key. */
async function runTool(services: ToolServices, tool: ToolDefinition, principal: Principal, args: Record<string, unknown>): Promise<{ body: object; replayed: boolean }> {
  refuseUnstorableText(args);
  if ('query' in tool) return { body: (await runQuery(services.gateway, queryOf(services, tool, args), { principal, input: args })) as object, replayed: false };
  const { idempotencyKey, ...input } = args;
  const operation = services.operations[tool.operation] as Parameters<typeof runOperation>[1];
  const { result, replayed } = await runOperation(services.gateway, operation, {
    principal,
    input: input as never,
    idempotencyKey: idempotencyKey as string | undefined,
    idempotencyKeyFrom: 'the argument `idempotencyKey`',
  });
  return { body: result as object, replayed };
}

function toolResult(body: object): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(body) }], structuredContent: body as Record<string, unknown> };
}

type Era = 'legacy' | 'modern';

/** The key of our one embedded input request (the approval page) in an input_required result. */
const APPROVAL_INPUT = 'approval';

/** The first revision that defines URL-mode elicitation and its -32042 error. Revisions are dates, so they compare as text. */
const FIRST_URL_ELICITATION_REVISION = '2025-11-25';

/** The revision a legacy request speaks when it names none (MCP Streamable HTTP: the server assumes 2025-03-26). */
const UNNAMED_LEGACY_REVISION = '2025-03-26';

/** The only modern revision this server speaks; every modern request's envelope names it. */
const MODERN_REVISION = '2026-07-28';

/** Every revision this server speaks, newest first: the modern one, then the SDK's legacy revisions. */
const SERVED_PROTOCOL_VERSIONS = [MODERN_REVISION, ...SUPPORTED_PROTOCOL_VERSIONS];

/**
 * Who is asking, as far as a URL elicitation goes: the revision of the exchange and what the client declared. The
 * capabilities are the SDK's per-request view: on 2026-07-28 the request's envelope; on a legacy exchange what
 * `initialize` declared, which a stateless server never sees on a later request (so a legacy tools/call has none).
 */
interface Asker {
  era: Era;
  revision: string;
  capabilities(): { elicitation?: { url?: unknown } } | undefined;
}

/**
 * The one rule for asking a client to open a page: the revision defines URL-mode elicitation (2025-11-25 and
 * later) and the client declared it (`elicitation.url`). A client declaring form mode only (`elicitation: {}`)
 * or nothing, or speaking an older revision, has not said it can open a URL for the user.
 */
function mayAskToVisit(asker: Asker): boolean {
  return asker.revision >= FIRST_URL_ELICITATION_REVISION && asker.capabilities()?.elicitation?.url !== undefined;
}

/**
 * A refusal that waits for a human (it carries an `approval` page: execute's approval_required, a purchase above
 * the approval threshold), rendered as MCP asks a human to visit a page, for a client that may be asked
 * (`mayAskToVisit`): on 2026-07-28 an input_required result with one URL-mode elicitation of the page; on
 * 2025-11-25 the -32042 URLElicitationRequired error (elicitationId = the approval's id, e.g. the intent). The
 * client opens the page, the owner approves, and the client's retry with the same idempotencyKey returns the
 * outcome. Any other client, and a 2026-07-28 retry that already answers our elicitation, gets the problem body
 * as a tool error instead (undefined here; no loop).
 */
function askToVisit(error: ApiError, approval: HumanApproval, asker: Asker, ctx: ServerContext): InputRequiredResult | undefined {
  if (!mayAskToVisit(asker)) return undefined;
  if (asker.era === 'legacy') {
    throw new UrlElicitationRequiredError([{ mode: 'url', message: approval.message, url: approval.url, elicitationId: approval.id }], error.options.detail);
  }
  if (ctx.mcpReq.inputResponses?.[APPROVAL_INPUT] !== undefined) return undefined;
  return inputRequired({ inputRequests: { [APPROVAL_INPUT]: inputRequired.elicitUrl({ message: approval.message, url: approval.url }) } });
}

/**
 * A tool call's server span (MCP semantic conventions). A client that sends W3C trace context in the request's
 * `_meta` (`traceparent`, `tracestate`) is continued, with a link to the HTTP request's span; otherwise the
 * call is a child of that span.
 */
function toolSpan(tool: ToolDefinition, ctx: ServerContext): SpanOptions {
  const caller = remoteParent(ctx.mcpReq._meta as Record<string, unknown> | undefined);
  const http = activeSpan();
  return {
    kind: 'server',
    parent: caller,
    links: caller && http ? [{ span: http }] : undefined,
    attributes: { 'mcp.method.name': 'tools/call', 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': tool.name, 'jsonrpc.request.id': String(ctx.mcpReq.id) },
  };
}

function call(
  services: ToolServices,
  tool: ToolDefinition,
  check: (args: Record<string, unknown>) => void,
  principal: Principal,
  args: Record<string, unknown>,
  asker: Asker,
  notes: ExchangeNotes,
  ctx: ServerContext,
): Promise<CallToolResult | InputRequiredResult> {
  return inSpan(`tools/call ${tool.name}`, () => toolSpan(tool, ctx), (span) => answer(services, tool, check, principal, args, asker, notes, ctx, span));
}

async function answer(
  services: ToolServices,
  tool: ToolDefinition,
  check: (args: Record<string, unknown>) => void,
  principal: Principal,
  args: Record<string, unknown>,
  asker: Asker,
  notes: ExchangeNotes,
  ctx: ServerContext,
  span: SpanRef | undefined,
): Promise<CallToolResult | InputRequiredResult> {
  try {
    check(args);
    const { body, replayed } = await runTool(services, tool, principal, args);
    if (replayed) notes.replayed();
    return toolResult(body);
  } catch (error) {
    const refusal = unexpectedAsApiError(await services.gateway.schema.answerFor(error));
    // A stored refusal answered again is a replay too.
    if (replayedRefusal(refusal)) notes.replayed();
    // A refusal is the caller's answer; a storage failure is the outage tracker's to announce; the rest is our fault.
    if (refusal.code === 'internal_error') services.gateway.log.error({ err: error, tool: tool.name }, 'MCP tool failed');
    if (span) setSpanAttributes(span, refusal.status < 500 ? { 'acg.refusal.code': refusal.code } : { 'error.type': refusal.code });
    const approval = refusal.options.approval;
    const elicitation = approval === undefined ? undefined : askToVisit(refusal, approval, asker, ctx);
    if (elicitation) return elicitation;
    // A tool's arguments are its operation's input (and `idempotencyKey`): a member is named under `arguments`, as the
    // argument check names one.
    const problem = problemBody(services.gateway.config.baseUrl, refusal, { retryAfterMember: true, nameMember: (path) => pathUnder('arguments', path) });
    // A read declares an output schema, which MCP requires structured content to match, and which the 1.x SDK's
    // client checks on errors too (a problem body there threw -32602 in the client instead of reaching the app):
    // its refusal carries the problem body as its text alone. An operation declares none: its refusal has both.
    if ('query' in tool) return { content: [{ type: 'text', text: JSON.stringify(problem) }], isError: true };
    return { ...toolResult(problem), isError: true };
  }
}

type ToolSchema = ReturnType<typeof fromJsonSchema<Record<string, unknown>>>;

interface ToolSchemas {
  /** What tools/list publishes; it lets every argument through to the tool, whose `check` refuses them. */
  input: ToolSchema;
  output?: ToolSchema;
  /** The tool's arguments against its input schema: the refusal every other tool error is (a problem body). */
  check: (args: Record<string, unknown>) => void;
}

/**
 * The schema tools/list shows (`published`), passing every argument through: the tool's own `check` refuses bad
 * arguments with a problem body, as every other refusal is, where the SDK's check answered a text ("Input
 * validation error: …") with no code, and for execute a dump of every action's schema.
 */
function publishedAs(published: JsonSchema): ToolSchema {
  return {
    '~standard': {
      version: 1,
      vendor: 'mcp',
      validate: (value: unknown) => ({ value: value as Record<string, unknown> }),
      jsonSchema: { input: () => published, output: () => published },
    },
  } as ToolSchema;
}

/**
 * The tools' own argument checks: the SDK's engine and settings (Ajv 2020-12, formats), stopping at the first violation,
 * and filling in the defaults the schema states as the HTTP face's validator fills a body's (Ajv's `useDefaults`,
 * Fastify's setting), so the same request reaches its operation, and its Idempotency-Key's fingerprint, in one form
 * whichever face asked (found from outside: a freeze over HTTP, retried over MCP with its key, answered
 * idempotency_key_reused, since HTTP had filled `releaseHolds: false` and MCP had not).
 */
const argumentsAjv = addFormats.default(new Ajv2020({ strict: false, validateFormats: true, validateSchema: false, allErrors: false, useDefaults: true }));

/**
 * The check of a tool's arguments against `input`, refusing them as the HTTP face refuses a body (400 invalid_input,
 * `errors` with each violation's path under `arguments`). An input that is a oneOf of branches told apart by `const`
 * members (execute's serviceId and action) is checked against the branch the arguments name, so its refusal says
 * what that action needs rather than why each other action does not match; arguments naming none, against the whole.
 */
function argumentCheck(input: JsonSchema): (args: Record<string, unknown>) => void {
  const whole = argumentsAjv.compile(input);
  // A oneOf of oneOfs (execute: by service, then by action) is checked against its leaves, each a whole call.
  const leavesOf = (schema: JsonSchema): JsonSchema[] => (Array.isArray(schema.oneOf) ? (schema.oneOf as JsonSchema[]).flatMap(leavesOf) : [schema]);
  const branches = (Array.isArray(input.oneOf) ? leavesOf(input) : []).map((branch) => ({
    consts: Object.entries((branch.properties ?? {}) as Record<string, JsonSchema>).flatMap(([name, member]) => ('const' in member ? [[name, member.const] as const] : [])),
    validate: argumentsAjv.compile(branch),
  }));
  // The members that tell the branches apart, in the order the first branch names them (serviceId, then action).
  const tellers = branches[0]?.consts.map(([name]) => name).filter((name) => branches.every(({ consts }) => consts.some(([other]) => other === name))) ?? [];
  return (args) => {
    // Arguments that name no branch: said by the first member whose value no branch (of those its earlier members
    // chose) has, naming the values that are, rather than by why each branch failed (found from outside: "must be
    // \"mail\"" three times and a oneOf for an unknown serviceId).
    let candidates = branches;
    for (const name of tellers) {
      const known = [...new Set(candidates.map(({ consts }) => consts.find(([other]) => other === name)![1]))];
      if (!known.includes(args[name])) {
        throw memberRefusal(name, `must be one of ${known.map((value) => JSON.stringify(value)).join(', ')}`);
      }
      candidates = candidates.filter(({ consts }) => consts.some(([other, value]) => other === name && value === args[name]));
    }
    // The one branch the arguments name (every teller known), checked alone; else the whole schema.
    const validate = tellers.length > 0 && candidates.length === 1 ? candidates[0]!.validate : whole;
    if (validate(args)) return;
    // As the HTTP routes say them: a union of literals (`order`) names every choice, not only the first.
    const errors = describeViolations('arguments', validate.errors ?? []);
    const first = errors[0];
    throw new ApiError('invalid_input', { detail: first ? `${first.path} ${first.message}` : 'the arguments do not match the tool\'s input schema', extra: { errors } });
  };
}

/**
 * Each tool's input and output schemas, converted (and their validators compiled) once per handler rather
 * than on every request: the server itself is per request, because its tool list depends on the caller. The
 * input a tool is shown with is the caller's kind's (`shownTo`: an agent is not shown the members only an owner
 * sends); its output and its check are the same for every caller, as its HTTP twin's are, so an agent that sends
 * its own `agentId` to execute_service is answered as over HTTP.
 */
function toolSchemas(services: ToolServices): (tool: ToolDefinition, kind: PrincipalKind) => ToolSchemas {
  const named = namedSchemas(services);
  const converted = new Map<string, Omit<ToolSchemas, 'input'> & { input: JsonSchema }>();
  const shown = new Map<string, ToolSchemas>();
  const convertedOf = (tool: ToolDefinition) => {
    let schemas = converted.get(tool.name);
    if (!schemas) {
      const output = toolOutputJson(tool, services, named);
      schemas = {
        input: toolInputJson(tool, services, named),
        ...(output ? { output: fromJsonSchema<Record<string, unknown>>(output as JsonSchemaType) } : {}),
        // Checked as HTTP checks a body, which does not hold the key: a missing key is then the operation runner's
        // refusal, idempotency_required as over HTTP (found from outside: invalid_input), though the published schema
        // says the argument is required.
        check: argumentCheck(toolInputJson(tool, services, named, false)),
      };
      converted.set(tool.name, schemas);
    }
    return schemas;
  };
  return (tool, kind) => {
    const key = `${tool.name} ${kind}`;
    let schemas = shown.get(key);
    if (!schemas) {
      const { input, ...rest } = convertedOf(tool);
      schemas = { ...rest, input: publishedAs(publishedInputJson(shownTo(input, kind) as JsonSchema)) };
      shown.set(key, schemas);
    }
    return schemas;
  };
}

/**
 * The SDK finds a called tool by indexing a plain object, so `constructor`, `toString` and the other members of
 * Object.prototype were found there and answered "Tool constructor disabled". With no prototype, an unknown name
 * is the SDK's own "Tool … not found" (-32602). Touches the SDK's registry only if it is still a plain object.
 */
function withoutPrototypeTools(server: McpServer): void {
  const registry = (server as unknown as { _registeredTools?: unknown })._registeredTools;
  if (registry !== null && typeof registry === 'object' && Object.getPrototypeOf(registry) === Object.prototype) Object.setPrototypeOf(registry, null);
}

/**
 * The server of one request: the principal's tools. A tool that `requires` delegation is listed for an agent
 * only while its mandate allows delegates (one read, for agents only). `protocolVersion` is a legacy request's
 * MCP-Protocol-Version header.
 */
async function buildMcpServer(
  services: ToolServices,
  schemasOf: (tool: ToolDefinition, kind: PrincipalKind) => ToolSchemas,
  principal: Principal,
  facts: CallerFacts,
  notes: ExchangeNotes,
  era: Era,
  protocolVersion: string | undefined,
): Promise<McpServer> {
  const server = new McpServer(MCP_SERVER_INFO, {
    // Every revision this server speaks, newest first. The SDK adds 2026-07-28 to a modern instance's list itself,
    // not to a legacy one's, whose transport refused an unknown MCP-Protocol-Version naming only the legacy
    // revisions (found from outside). `initialize` still negotiates legacy revisions only (the SDK filters them).
    supportedProtocolVersions: SERVED_PROTOCOL_VERSIONS,
    instructions: INSTRUCTIONS,
    capabilities: { tools: { listChanged: false } },
    // The tool list depends on the credential: never share a cached copy across callers.
    cacheHints: { 'tools/list': { ttlMs: 0, cacheScope: 'private' }, 'server/discover': { ttlMs: 0, cacheScope: 'private' } },
  });
  withoutPrototypeTools(server);
  const asker: Asker = {
    era,
    revision: era === 'modern' ? MODERN_REVISION : (protocolVersion ?? UNNAMED_LEGACY_REVISION),
    capabilities: () => server.server.getClientCapabilities(),
  };
  const { delegating } = facts;
  for (const tool of TOOLS) {
    if (!tool.kinds.includes(principal.kind)) continue;
    if (tool.requires === 'delegation' && !delegating) continue;
    const schemas = schemasOf(tool, principal.kind);
    server.registerTool(
      tool.name,
      { title: tool.title, description: tool.description, inputSchema: schemas.input, outputSchema: schemas.output, annotations: tool.annotations },
      (args: Record<string, unknown>, ctx: ServerContext) => call(services, tool, schemas.check, principal, args, asker, notes, ctx),
    );
  }
  return server;
}

export function createGatewayMcpHandler(services: ToolServices, options: { maxRequestBodySize: number }): McpHttpHandler {
  const schemasOf = toolSchemas(services);
  return createMcpHandler(
    ({ authInfo, era, requestInfo }) =>
      buildMcpServer(services, schemasOf, principalFrom(authInfo), callerFactsFrom(authInfo), exchangeNotesFrom(authInfo), era, requestInfo?.headers.get('mcp-protocol-version') ?? undefined),
    {
      legacy: 'stateless',
      responseMode: 'auto',
      maxRequestBodySize: options.maxRequestBodySize,
      onerror: (error) => services.gateway.log.info({ err: error }, 'MCP request refused'),
    },
  );
}

/** The spec schema (the SDK's) of each request method this server answers, by method. */
const REQUEST_SCHEMAS = {
  initialize: specTypeSchemas.InitializeRequest,
  ping: specTypeSchemas.PingRequest,
  'server/discover': specTypeSchemas.DiscoverRequest,
  'tools/list': specTypeSchemas.ListToolsRequest,
  'tools/call': specTypeSchemas.CallToolRequest,
} as const;

/** Enough of a schema failure to find the fault; the rest follows once it is fixed. */
const PARAMS_ISSUES_SHOWN_MAX = 3;

/**
 * Why a JSON-RPC request's params are not what its method takes ("Invalid params for tools/list:
 * params.cursor: …"), or undefined when they are, or the method is not one this server answers. Legacy
 * `initialize` only: on 2026-07-28 it is a removed method, which the SDK answers 404 -32601 (SEP-2575).
 */
function invalidParams(message: Record<string, unknown>, protocolVersion: string | undefined): string | undefined {
  const method = message.method;
  if (typeof method !== 'string' || !Object.hasOwn(REQUEST_SCHEMAS, method)) return undefined;
  const legacy = protocolVersion === undefined || SUPPORTED_PROTOCOL_VERSIONS.includes(protocolVersion);
  if (method === 'initialize' && !legacy) return undefined;
  const result = REQUEST_SCHEMAS[method as keyof typeof REQUEST_SCHEMAS]['~standard'].validate(message);
  if (!('issues' in result) || !result.issues) {
    // Every tool is listed in one page, so no cursor names a page of it: MCP's pagination answers an invalid cursor
    // -32602 (found from outside: a made-up cursor was answered the whole list, as if it were the first page).
    const params = message.params as { cursor?: unknown } | undefined;
    if (method === 'tools/list' && params?.cursor !== undefined) return `Invalid params for tools/list: params.cursor: ${JSON.stringify(params.cursor)} is no cursor this server gave (it lists every tool in one page, with no nextCursor)`;
    return undefined;
  }
  const issues = result.issues.slice(0, PARAMS_ISSUES_SHOWN_MAX).map((issue) => {
    const path = (issue.path ?? []).map((segment) => String(typeof segment === 'object' ? segment.key : segment)).join('.');
    return `${path || 'params'}: ${issue.message}`;
  });
  return `Invalid params for ${method}: ${issues.join('; ')}`;
}

/** What POST /mcp needs from this module, which it loads on its first request (http.ts). */
export interface GatewayMcp {
  handler: McpHttpHandler;
  /** Why a request's params are not what its method takes (the -32602 message), if they are not. */
  invalidParams(message: Record<string, unknown>, protocolVersion: string | undefined): string | undefined;
  /** Refuses (403) a Host or browser Origin naming another host than the base URL: DNS rebinding. */
  checkHostAndOrigin(host: string | undefined, origin: string | undefined): void;
  /**
   * The -32000 message for an MCP-Protocol-Version that names no revision at all (not a date), which the SDK takes for
   * a modern one and answers with a missing envelope (found from outside: `bogus` was told to add `_meta`); a date
   * it does not speak the SDK refuses itself, naming the revisions it does.
   */
  unknownRevision(protocolVersion: string | undefined): string | undefined;
}

export function gatewayMcp(services: ToolServices, options: { maxRequestBodySize: number; baseUrl: string }): GatewayMcp {
  const allowed = [new URL(options.baseUrl).hostname];
  // The URL to connect to, said with the refusal (found from outside: `localhost` for a gateway on 127.0.0.1 read as
  // a credential refused). Another name of the same machine is still another origin to OAuth: the resource a token is
  // bound to, and the metadata a client checks against the URL it connected to, name the base URL.
  const endpoint = `${options.baseUrl}/mcp`;
  return {
    handler: createGatewayMcpHandler(services, options),
    invalidParams,
    unknownRevision(protocolVersion) {
      if (protocolVersion === undefined || SERVED_PROTOCOL_VERSIONS.includes(protocolVersion) || /^\d{4}-\d{2}-\d{2}$/.test(protocolVersion)) return undefined;
      return `Bad Request: Unsupported protocol version: ${protocolVersion} (supported versions: ${SERVED_PROTOCOL_VERSIONS.join(', ')})`;
    },
    checkHostAndOrigin(host, origin) {
      const hostCheck = validateHostHeader(host, allowed);
      if (!hostCheck.ok) throw new ApiError('forbidden', { detail: `the Host header must name ${allowed[0]} (${hostCheck.message}): connect to ${endpoint}, the gateway's base URL (ACG_BASE_URL)` });
      const originCheck = validateOriginHeader(origin, allowed);
      if (!originCheck.ok) throw new ApiError('forbidden', { detail: `a browser Origin must be ${allowed[0]} (${originCheck.message})` });
    },
  };
}
