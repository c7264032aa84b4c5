// x402 over MCP (specs/transports-v2/mcp.md, its tool-result binding, settled on x402's main line and shipped
// by x402's own @x402/mcp): a paid tool answers an unpaid call with a tool error whose `structuredContent` (and
// `content[0].text`, as JSON) is the PaymentRequired; the client calls again with the PaymentPayload in
// `params._meta["x402/payment"]`; the paid answer carries the settlement in `result._meta["x402/payment-response"]`.
// Both halves are structural over the MCP SDK (tool callbacks get `(args, ctx)`; clients have `callTool`), so
// this package needs no MCP dependency. The experimental `org.x402/payment` extension binding is left out.
import type { PaymentResponseContext } from '@x402/core/client';
import type { x402ResourceServer } from '@x402/core/server';
import type { PaymentPayload, PaymentRequired, PaymentRequirements, Price, ResourceInfo, SettleResponse } from '@x402/core/types';
import { CREDIT_NETWORK, CREDIT_SCHEME, MCP_PAYMENT_META_KEY, MCP_PAYMENT_RESPONSE_META_KEY } from './constants.js';
import { checkCreditPrice } from './routes.js';

/**
 * A tool result as MCP carries it (the members this module reads and writes). The content types are named, so a
 * handler's `{ type: 'text', … }` keeps its literal type and `paidTool`'s result is still the SDK's CallToolResult
 * (found from outside: as `string`, the README's own sample did not compile); any other type is still accepted.
 */
export interface ToolResult {
  content: ReadonlyArray<{ type: 'text' | 'image' | 'audio' | 'resource' | 'resource_link' | (string & {}); [member: string]: unknown }>;
  structuredContent?: unknown;
  isError?: boolean;
  _meta?: Record<string, unknown>;
  [member: string]: unknown;
}

/**
 * A tool's input schema as MCP SDK 2.x takes one: a Standard Schema (standardschema.dev) with its JSON Schema, as zod
 * ≥ 4.2 schemas and the SDK's `fromJsonSchema` are.
 */
export interface ToolInputSchema<Output = unknown> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardResult<Output> | Promise<StandardResult<Output>>;
    readonly jsonSchema: {
      readonly input: (options: JsonSchemaOptions) => Record<string, unknown>;
      readonly output: (options: JsonSchemaOptions) => Record<string, unknown>;
    };
    readonly types?: { readonly input: unknown; readonly output: Output } | undefined;
  };
}

/** What a Standard JSON Schema's converter is asked for (the spec's `StandardJSONSchemaV1.Options`). */
interface JsonSchemaOptions {
  readonly target: 'draft-2020-12' | 'draft-07' | 'openapi-3.0' | (object & string);
  readonly libraryOptions?: Record<string, unknown> | undefined;
}

/** What a Standard Schema's `validate` answers: the value read, or the issues. */
type StandardResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<{ readonly message: string; readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined }> };

/** The arguments a schema hands the tool. */
type ArgumentsOf<Schema extends ToolInputSchema> = NonNullable<Schema['~standard']['types']>['output'];

export interface PaidToolOptions {
  /** The tool's name: its resource is `mcp://tool/{name}` unless `resource.url` says otherwise. */
  name: string;
  /** The price of one call ("$0.005", "0.5 credits", `{ amount, asset: 'microcredit' }`), checked when the tool is wrapped. */
  price: Price;
  /** Your merchant id. */
  payTo: string;
  /** The offer, when the scheme server has no default or this tool sells another. */
  offerId?: string;
  maxTimeoutSeconds?: number;
  resource?: Partial<ResourceInfo>;
  /**
   * The tool's input schema. Given, the wrapper reads the arguments with it, after the payment is verified, so a call
   * it refuses is not charged and its hold goes back at once; register the tool with the wrapper's own `inputSchema`
   * (the same JSON Schema listed, every call let through to the wrapper). Without it the MCP SDK refuses such a call
   * before the wrapper sees it, and the hold lapses at its deadline.
   */
  inputSchema?: ToolInputSchema;
}

/** A paid tool's callback, and the schema to register it with when it reads its own arguments. */
export type PaidToolCallback<Args, Result extends ToolResult, Schema extends ToolInputSchema | undefined = undefined> = ((args: Args, context: unknown) => Promise<Result>) &
  (Schema extends ToolInputSchema ? { readonly inputSchema: Schema } : unknown);

/** The transport context the resource server's hooks see for a tool call (its `result` once the tool ran). */
interface ToolTransportContext {
  toolName: string;
  arguments: unknown;
  result?: ToolResult;
}

/** The `_meta` of a tool call: the MCP SDK 2.x gives it at `ctx.mcpReq._meta`, 1.x at `extra._meta`. */
function metaOf(context: unknown): Record<string, unknown> | undefined {
  const ctx = context as { mcpReq?: { _meta?: Record<string, unknown> }; _meta?: Record<string, unknown> } | undefined;
  return ctx?.mcpReq?._meta ?? ctx?._meta;
}

function isPaymentPayload(value: unknown): value is PaymentPayload {
  return typeof value === 'object' && value !== null && typeof (value as PaymentPayload).x402Version === 'number' && typeof (value as PaymentPayload).payload === 'object';
}

/**
 * The schema a paid tool is registered with: its own JSON Schema listed, every value let through, so the SDK calls
 * the wrapper with whatever the agent sent, and the wrapper reads it once the payment is verified.
 */
function letThrough<Schema extends ToolInputSchema>(schema: Schema, toolName: string): Schema {
  const standard = schema['~standard'];
  if (typeof standard?.validate !== 'function' || typeof standard.jsonSchema?.input !== 'function') {
    throw new TypeError(`tool "${toolName}": inputSchema must be a Standard Schema with its JSON Schema (zod 4.2 or later, or the MCP SDK's fromJsonSchema)`);
  }
  const letThroughSchema: ToolInputSchema = {
    '~standard': {
      version: 1,
      vendor: standard.vendor,
      validate: (value) => ({ value }),
      jsonSchema: { input: (options) => standard.jsonSchema.input(options), output: (options) => standard.jsonSchema.output(options) },
    },
  };
  return letThroughSchema as Schema;
}

/** The arguments as the tool's schema reads them, or the tool error the MCP SDK answers a refusal with (its words). */
async function readArguments(schema: ToolInputSchema | undefined, args: unknown, toolName: string): Promise<{ read: true; value: unknown } | { read: false; refusal: ToolResult }> {
  if (!schema) return { read: true, value: args };
  const result = await schema['~standard'].validate(args ?? {});
  if (!result.issues?.length) return { read: true, value: (result as { value: unknown }).value };
  const words = result.issues.map((issue) => (issue.path?.length ? `${issue.path.map((part) => String(typeof part === 'object' ? part.key : part)).join('.')}: ${issue.message}` : issue.message));
  return { read: false, refusal: { isError: true, content: [{ type: 'text', text: `Input validation error: Invalid arguments for tool ${toolName}: ${words.join(', ')}` }] } };
}

/** The spec's payment-required tool result: PaymentRequired as structured content and as JSON text. */
function paymentRequiredResult(paymentRequired: PaymentRequired): ToolResult {
  return {
    isError: true,
    structuredContent: paymentRequired as unknown as Record<string, unknown>,
    content: [{ type: 'text', text: JSON.stringify(paymentRequired) }],
  };
}

/**
 * Wraps an MCP tool callback so each call is paid with agent credit through `server` (a
 * {@link creditResourceServer}): unpaid calls get the PaymentRequired result, paid ones are verified, run,
 * settled and answered with the settlement in `_meta["x402/payment-response"]`. A call the tool does not serve is
 * not charged (the hold is released): its handler throws or answers `isError`, or its `inputSchema` refuses the
 * arguments. Repeats of one payment get the first answer (single flight). Register the result as the tool's
 * callback, with its `inputSchema` when it has one:
 * `const tool = paidTool(server, { …, inputSchema }, handler); mcp.registerTool(name, { …, inputSchema: tool.inputSchema }, tool)`.
 * A price this scheme cannot charge throws `CreditError('invalid_price')` here, naming the tool, not at its first call.
 */
export function paidTool<Schema extends ToolInputSchema, Result extends ToolResult = ToolResult>(
  server: x402ResourceServer,
  options: PaidToolOptions & { inputSchema: Schema },
  handler: (args: ArgumentsOf<Schema>, context: unknown) => Result | Promise<Result>,
): PaidToolCallback<ArgumentsOf<Schema>, Result, Schema>;
export function paidTool<Args, Result extends ToolResult = ToolResult>(
  server: x402ResourceServer,
  options: PaidToolOptions,
  handler: (args: Args, context: unknown) => Result | Promise<Result>,
): PaidToolCallback<Args, Result>;
export function paidTool<Args, Result extends ToolResult = ToolResult>(
  server: x402ResourceServer,
  options: PaidToolOptions,
  handler: (args: Args, context: unknown) => Result | Promise<Result>,
): PaidToolCallback<Args, Result, ToolInputSchema | undefined> {
  checkCreditPrice(`tool "${options.name}"`, options.price);
  const { inputSchema } = options;
  const registeredSchema = inputSchema === undefined ? undefined : letThrough(inputSchema, options.name);
  const resourceInfo: ResourceInfo = {
    url: options.resource?.url ?? `mcp://tool/${options.name}`,
    description: options.resource?.description ?? `Tool: ${options.name}`,
    mimeType: options.resource?.mimeType ?? 'application/json',
  };
  let accepts: Promise<PaymentRequirements[]> | undefined;
  const requirements = (): Promise<PaymentRequirements[]> => {
    accepts ??= (async () => {
      if (!server.getSupportedKind(2, CREDIT_NETWORK, CREDIT_SCHEME)) await server.initialize();
      return server.buildPaymentRequirements({
        scheme: CREDIT_SCHEME,
        network: CREDIT_NETWORK,
        price: options.price,
        payTo: options.payTo,
        ...(options.maxTimeoutSeconds === undefined ? {} : { maxTimeoutSeconds: options.maxTimeoutSeconds }),
        ...(options.offerId === undefined ? {} : { extra: { offerId: options.offerId } }),
      });
    })().catch((error: unknown) => {
      accepts = undefined;
      throw error;
    });
    return accepts;
  };
  // A payment-required answer is a valid tool result of any SDK's type: an error with text and structured content.
  const refusal = async (error: string, transportContext: ToolTransportContext, payload?: PaymentPayload): Promise<Result> =>
    paymentRequiredResult(await server.createPaymentRequiredResponse(await requirements(), resourceInfo, error, undefined, transportContext, payload)) as Result;

  const callback = async (args: Args, context: unknown): Promise<Result> => {
    const transportContext: ToolTransportContext = { toolName: options.name, arguments: args };
    const input = await readArguments(inputSchema, args, options.name);
    const payment = metaOf(context)?.[MCP_PAYMENT_META_KEY];
    // Arguments the tool refuses are not worth paying for: refused as the SDK would, before any payment is asked.
    if (!isPaymentPayload(payment)) return input.read ? refusal('Payment required to call this tool', transportContext) : (input.refusal as Result);
    const offered = await server.createPaymentRequiredResponse(await requirements(), resourceInfo, undefined, undefined, transportContext);
    const matching = server.findMatchingRequirements(offered.accepts, payment);
    if (!matching) return refusal('No matching payment requirements', transportContext);
    const verified = await server.verifyPayment(payment, matching, undefined, transportContext);
    if (!verified.isValid) return refusal(verified.invalidReason ?? 'Payment verification failed', transportContext, payment);

    let result: Result;
    if (verified.skipHandler) {
      // A repeat of a payment already served: its first answer, without running the tool again.
      result = verified.skipHandler.body as Result;
    } else {
      // Every way the tool does not serve a verified payment cancels it, which releases its hold (the scheme's
      // onVerifiedPaymentCanceled): arguments refused, the handler's throw, its isError.
      const cancellation = server.createPaymentCancellationDispatcher(payment, matching, undefined, transportContext);
      if (!input.read) {
        await cancellation.cancel({ reason: 'handler_failed', error: input.refusal });
        return input.refusal as Result;
      }
      try {
        result = await handler(input.value as Args, context);
      } catch (error) {
        await cancellation.cancel({ reason: 'handler_threw', error });
        throw error;
      }
      if (result.isError) {
        await cancellation.cancel({ reason: 'handler_failed' });
        return result;
      }
    }
    transportContext.result = result;
    let settlement: SettleResponse;
    try {
      settlement = await server.settlePayment(payment, matching, undefined, transportContext);
    } catch (error) {
      return refusal(`Settlement failed: ${(error as Error).message}`, transportContext);
    }
    // The spec: a failed settlement answers the payment error, never the tool's content.
    if (!settlement.success) return refusal(`Settlement failed: ${settlement.errorReason ?? 'unknown'}`, transportContext);
    return { ...result, _meta: { ...result._meta, [MCP_PAYMENT_RESPONSE_META_KEY]: settlement } };
  };
  return registeredSchema === undefined ? callback : Object.assign(callback, { inputSchema: registeredSchema });
}

/** What an MCP client needs here: `callTool` as the official SDK's Client has it. */
export interface ToolCaller {
  callTool(params: { name: string; arguments?: Record<string, unknown>; _meta?: Record<string, unknown> }): Promise<unknown>;
}

/** What pays: x402's `x402Client` (with {@link CreditSchemeClient} registered). */
export interface PaymentPayloadMaker {
  createPaymentPayload(paymentRequired: PaymentRequired): Promise<PaymentPayload>;
  /**
   * x402Client's: told of each paid call's answer; `{ recovered: true }` asks for one more attempt at once (the
   * credit scheme's, when the server could not learn from the gateway what became of the payment: the same payment
   * goes again).
   */
  handlePaymentResponse?(context: PaymentResponseContext): Promise<void | { recovered: true }>;
}

export interface PaidToolCall {
  /** The tool's answer (the payment error when the payment was refused). */
  result: ToolResult;
  /** Whether a payment was sent. */
  paid: boolean;
  /** The settlement (`_meta["x402/payment-response"]`) of a paid answer. */
  paymentResponse?: SettleResponse;
  /** The PaymentRequired of a refusal (its `error` says why), when the answer is one. */
  paymentRequired?: PaymentRequired;
}

/** The PaymentRequired in a tool result: `structuredContent`, else the JSON of `content[0].text` (as the spec asks clients to read it). */
export function paymentRequiredOf(result: unknown): PaymentRequired | undefined {
  const tool = result as Partial<ToolResult> | undefined;
  if (!tool?.isError) return undefined;
  const looksRequired = (value: unknown): value is PaymentRequired =>
    typeof value === 'object' && value !== null && typeof (value as PaymentRequired).x402Version === 'number' && Array.isArray((value as PaymentRequired).accepts);
  if (looksRequired(tool.structuredContent)) return tool.structuredContent;
  const text = tool.content?.[0]?.text;
  if (typeof text !== 'string') return undefined;
  try {
    const parsed: unknown = JSON.parse(text);
    return looksRequired(parsed) ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Calls a tool, and when it answers PaymentRequired, pays (through `payer`) and calls it once more with the
 * payment in `_meta["x402/payment"]`. Refusals of the payment itself (e.g. `insufficient_credits`) throw
 * the scheme client's CreditError. The answer goes to x402Client's payment response hooks, as @x402/fetch does it:
 * when one asks (the credit scheme's, for a payment the server could not settle for want of the gateway), the same
 * payment is presented once more.
 */
export async function callPaidTool(client: ToolCaller, payer: PaymentPayloadMaker, params: { name: string; arguments?: Record<string, unknown>; _meta?: Record<string, unknown> }): Promise<PaidToolCall> {
  const first = (await client.callTool(params)) as ToolResult;
  const required = paymentRequiredOf(first);
  if (!required) return { result: first, paid: false };
  const paidCall = async () => {
    const payment = await payer.createPaymentPayload(required);
    const result = (await client.callTool({ ...params, _meta: { ...params._meta, [MCP_PAYMENT_META_KEY]: payment } })) as ToolResult;
    const paymentResponse = result._meta?.[MCP_PAYMENT_RESPONSE_META_KEY] as SettleResponse | undefined;
    const refused = paymentRequiredOf(result);
    const recovered = await payer.handlePaymentResponse?.({
      paymentPayload: payment,
      requirements: payment.accepted,
      ...(paymentResponse ? { settleResponse: paymentResponse } : {}),
      ...(refused ? { paymentRequired: refused } : {}),
    });
    return { call: { result, paid: true, ...(paymentResponse ? { paymentResponse } : {}), ...(refused ? { paymentRequired: refused } : {}) }, recovered: recovered?.recovered === true };
  };
  const second = await paidCall();
  return second.recovered ? (await paidCall()).call : second.call;
}
