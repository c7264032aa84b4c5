// One execution and one settle per attestation `jti` in the resource server. The draft: "verification
// prevents double charge, not double execution": two presentations of one attestation can both pass
// /verify before either settles, and the gateway then charges once but the merchant has served twice. So the
// first presentation claims the `jti` before it is verified; a repeat waits for it and then gets the cached
// outcome (the same body and PAYMENT-RESPONSE) without running the handler or settling again, until the
// attestation expires. It rides on x402ResourceServer's lifecycle hooks, which every transport runs
// (@x402/express, @x402/hono, the MCP wrapper of this package), as the scheme's own hooks.
//
// A repeat gets the kept answer only when it is the same request (its method, URL and body, or its tool and
// arguments): an agent whose payment's settle went unanswered presents it again, and may do so with another request
// to the same resource (found from outside: a later POST got an earlier POST's answer, and a tool call another
// call's). A payment whose settle went unanswered has given the agent nothing, so its repeat, another request or one
// whose answer was not kept (not JSON or HTML, or too large), runs the handler again and settles again: the gateway
// answers the second settle of one jti with the first's capture, so the agent is charged once for the one answer it
// gets. A payment that was served answers only the same request again; another is refused
// (`paid_for_another_request`, which the agent's client answers with a new payment for that request).
import type { AfterSettleHook, AfterVerifyHook, BeforeSettleHook, BeforeVerifyHook, OnSettleFailureHook, OnVerifiedPaymentCanceledHook, OnVerifyFailureHook } from '@x402/core/server';
import { createHash } from 'node:crypto';
import type { HTTPAdapter } from '@x402/core/server';
import type { PaymentPayload, SettleResponse } from '@x402/core/types';
import { SettleError } from '@x402/core/types';
import { decodeJwt } from 'jose';

export interface SingleFlightOptions {
  /** Outcomes kept at once (default 10,000); past it, finished outcomes go oldest first. */
  entriesMax?: number;
  /** The largest response body kept for a replay (default 1 MiB); a bigger one is not replayed, its repeat is refused. */
  bodyBytesMax?: number;
  /** How long a repeat waits for the first presentation to finish (default 30 s); then it is refused, never run. */
  waitMsMax?: number;
  /** How long past the attestation's `exp` an outcome is kept (default 30 s, the gateway's clock tolerance). */
  clockToleranceS?: number;
  /** For tests: the clock. */
  nowMs?: () => number;
}

/** A response as the skip-handler path of x402's transports can answer it again. */
export interface ReplayableResponse {
  contentType: string;
  body: unknown;
}

type Phase = 'running' | 'served' | 'unsettled';

interface Outcome {
  jti: string;
  attestation: string;
  resource: string;
  /** The request the outcome is the answer to (`requestOf`); undefined when it could not be read. */
  request: string | undefined;
  expiresAtMs: number;
  phase: Phase;
  /** Resolved when the outcome stops running (served, unsettled or dropped). */
  done: Promise<void>;
  finish: () => void;
  /** The payment payload of the request running it now (the first presentation, or a repeat that took it up). */
  claimant: object;
  payer?: string;
  response?: ReplayableResponse;
  settlement?: SettleResponse;
}

interface Presentation {
  jti: string;
  attestation: string;
  resource: string;
  request: string | undefined;
  expiresAtMs: number;
}

/** The refusal of a request under a payment that paid for another request to the same resource. */
const PAID_FOR_ANOTHER_REQUEST = 'paid_for_another_request';

const ENTRIES_MAX_DEFAULT = 10_000;
const BODY_BYTES_MAX_DEFAULT = 1024 * 1024;
const WAIT_MS_MAX_DEFAULT = 30_000;
const CLOCK_TOLERANCE_S_DEFAULT = 30;

/** The attestation, its `jti` and `exp` (read, not verified: the gateway verifies; only an identical token is ever replayed). */
function presentationOf(payload: unknown, resource: unknown, request: string | undefined): Presentation | undefined {
  const attestation = (payload as PaymentPayload | undefined)?.payload?.attestation;
  if (typeof attestation !== 'string' || typeof resource !== 'string') return undefined;
  try {
    const claims = decodeJwt(attestation);
    if (typeof claims.jti !== 'string' || typeof claims.exp !== 'number') return undefined;
    return { jti: claims.jti, attestation, resource, request, expiresAtMs: claims.exp * 1000 };
  } catch {
    return undefined;
  }
}

/** JSON with object members in key order, so that two equal values read alike. */
function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, member: unknown) =>
    member !== null && typeof member === 'object' && !Array.isArray(member) && !(member instanceof Uint8Array)
      ? Object.fromEntries(Object.entries(member as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : typeof member === 'bigint'
        ? member.toString()
        : member,
  );
}

/**
 * The body an Express request was parsed into before the payment middleware (`req.body`, which @x402/express's
 * adapter keeps), read as it is, never by calling the adapter's `getBody`: @x402/hono's reads the stream as JSON, and
 * the handler then got other bytes, or none (found from outside). Undefined for any other framework, or none parsed.
 */
function parsedBodyOf(adapter: HTTPAdapter): unknown {
  const request = (adapter as { req?: unknown }).req as { body?: unknown; _body?: unknown } | undefined;
  if (typeof request !== 'object' || request === null) return undefined;
  const body = request.body;
  // Express 4's body parsers leave `{}` on a body of a type they do not read, and mark one they read (`_body`): an
  // empty object is the body only when so marked (found from outside: two unread 2-byte text bodies were taken for one).
  const empty = typeof body === 'object' && body !== null && !(body instanceof Uint8Array) && Object.keys(body).length === 0;
  return empty && request._body !== true ? undefined : body;
}

/**
 * What a request asks, as a digest: an MCP tool call's tool and arguments (this package's paidTool), an HTTP
 * request's method, URL, `Accept` and `Content-Type`, and body as Express parsed it. Undefined when it cannot be read
 * whole (a body no parser read before the payment middleware, or another framework's): such a request is never taken
 * for another. Other headers are not compared.
 */
function requestOf(transportContext: unknown): string | undefined {
  const context = transportContext as { toolName?: unknown; arguments?: unknown; request?: { adapter?: HTTPAdapter } } | undefined;
  let described: unknown[];
  if (typeof context?.toolName === 'string') {
    described = ['tool', context.toolName, context.arguments ?? null];
  } else {
    const adapter = context?.request?.adapter;
    if (!adapter) return undefined;
    const method = adapter.getMethod().toUpperCase();
    const declared = adapter.getHeader('content-length');
    const hasBody = adapter.getHeader('transfer-encoding') !== undefined || (declared !== undefined && declared !== '0');
    let body: unknown = null;
    if (hasBody) {
      body = parsedBodyOf(adapter);
      // No body parsed: the request cannot be compared.
      if (body === undefined || body === null) return undefined;
    }
    described = ['http', method, adapter.getUrl(), adapter.getHeader('accept') ?? null, adapter.getHeader('content-type') ?? null, body];
  }
  try {
    return createHash('sha256').update(canonicalJson(described)).digest('base64url');
  } catch {
    return undefined;
  }
}

/** A header of a transport's response headers, by its lower-case name. */
export function headerOf(headers: Record<string, string> | undefined, name: string): string | undefined {
  if (!headers) return undefined;
  const entry = Object.entries(headers).find(([key]) => key.toLowerCase() === name);
  return entry?.[1];
}

/**
 * The coalescer: one per resource server (the scheme server makes one). Its `hooks` are the scheme's
 * lifecycle hooks; `size` is for tests and metrics.
 */
export class SingleFlight {
  private readonly entries = new Map<string, Outcome>();
  /** The request that claimed an outcome, by its payment payload object (the same object through verify, settle and cancel). */
  private readonly owners = new WeakMap<object, Outcome>();
  /** Repeats answered from an outcome, by their payload object. */
  private readonly repeats = new WeakMap<object, Outcome>();
  /** Repeats that took up an open payment to run their own request (its first presentation's settle went unanswered). */
  private readonly reruns = new WeakSet<object>();
  private readonly entriesMax: number;
  private readonly bodyBytesMax: number;
  private readonly waitMsMax: number;
  private readonly toleranceMs: number;
  private readonly nowMs: () => number;

  constructor(options: SingleFlightOptions = {}) {
    this.entriesMax = options.entriesMax ?? ENTRIES_MAX_DEFAULT;
    this.bodyBytesMax = options.bodyBytesMax ?? BODY_BYTES_MAX_DEFAULT;
    this.waitMsMax = options.waitMsMax ?? WAIT_MS_MAX_DEFAULT;
    this.toleranceMs = (options.clockToleranceS ?? CLOCK_TOLERANCE_S_DEFAULT) * 1000;
    this.nowMs = options.nowMs ?? Date.now;
  }

  /** Outcomes kept now (running ones included). */
  get size(): number {
    return this.entries.size;
  }

  /** Whether a payment payload is a repeat answered from the cache (its handler does not run). */
  isRepeat(payload: object): boolean {
    return this.repeats.has(payload);
  }

  /**
   * Whether a payment payload runs again a payment whose first settle went unanswered (it may be captured): its
   * handler's failure leaves the payment open for the next request, and nothing is released.
   */
  isRerun(payload: object): boolean {
    return this.reruns.has(payload);
  }

  /** Whether a payment payload claimed its `jti` here (it runs the handler, and settles or releases). */
  isOwner(payload: object): boolean {
    return this.owners.has(payload);
  }

  /** The outcome of a jti, unless its attestation expired (then the gateway refuses any presentation of it). */
  private current(jti: string): Outcome | undefined {
    const entry = this.entries.get(jti);
    if (entry && entry.expiresAtMs + this.toleranceMs <= this.nowMs()) {
      this.entries.delete(jti);
      return undefined;
    }
    return entry;
  }

  private claim(presentation: Presentation, claimant: object): Outcome {
    let finish!: () => void;
    const done = new Promise<void>((resolve) => (finish = resolve));
    const entry: Outcome = { ...presentation, phase: 'running', done, finish, claimant };
    this.entries.set(presentation.jti, entry);
    if (this.entries.size > this.entriesMax) this.evict();
    return entry;
  }

  /**
   * An unsettled outcome taken up by a repeat, so that other repeats wait for it: one of the same request, answered
   * from the kept response (`rerun` false), or one that runs the handler again, for its request (nothing kept).
   */
  private takeUp(entry: Outcome, presentation: Presentation, claimant: object, rerun: boolean): void {
    let finish!: () => void;
    entry.done = new Promise<void>((resolve) => (finish = resolve));
    entry.finish = finish;
    entry.phase = 'running';
    entry.claimant = claimant;
    if (!rerun) return;
    entry.request = presentation.request;
    entry.response = undefined;
    entry.settlement = undefined;
  }

  /** Whether another request took the outcome up meanwhile: its end is that one's to say. */
  private takenOver(payload: object, entry: Outcome): boolean {
    return entry.claimant !== payload;
  }

  /** Drops expired outcomes, then the oldest finished ones, until the set is within its bound. */
  private evict(): void {
    const nowMs = this.nowMs();
    for (const [jti, entry] of this.entries) {
      if (entry.expiresAtMs + this.toleranceMs <= nowMs) this.entries.delete(jti);
    }
    for (const [jti, entry] of this.entries) {
      if (this.entries.size <= this.entriesMax) return;
      if (entry.phase !== 'running') this.entries.delete(jti);
    }
  }

  private drop(entry: Outcome): void {
    if (this.entries.get(entry.jti) === entry) this.entries.delete(entry.jti);
    entry.finish();
  }

  private async waitFor(entry: Outcome): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), this.waitMsMax)));
    try {
      return await Promise.race([entry.done.then(() => true), timedOut]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** The handler's response as a repeat can get it again: JSON (parsed) or HTML, within the size bound. */
  private replayable(transportContext: unknown): ReplayableResponse | undefined {
    const context = transportContext as { responseBody?: unknown; responseHeaders?: Record<string, string>; result?: unknown } | undefined;
    if (!context) return undefined;
    if (context.result !== undefined) return { contentType: 'application/json', body: context.result };
    if (!(context.responseBody instanceof Uint8Array) || context.responseBody.byteLength > this.bodyBytesMax) return undefined;
    const contentType = headerOf(context.responseHeaders, 'content-type') ?? '';
    const text = Buffer.from(context.responseBody).toString('utf8');
    if (/\bjson\b/i.test(contentType)) {
      try {
        return { contentType, body: JSON.parse(text) };
      } catch {
        return undefined;
      }
    }
    return contentType.toLowerCase().includes('text/html') ? { contentType, body: text } : undefined;
  }

  private readonly beforeVerify: BeforeVerifyHook = async (context) => {
    const presentation = presentationOf(context.paymentPayload, context.requirements.extra?.resource, requestOf(context.transportContext));
    if (!presentation) return undefined;
    for (;;) {
      const entry = this.current(presentation.jti);
      if (!entry) {
        this.owners.set(context.paymentPayload, this.claim(presentation, context.paymentPayload));
        return undefined;
      }
      // Wait first, whatever the token: a forged one claiming this jti is dropped as soon as the gateway refuses it.
      if (entry.phase === 'running') {
        if (!(await this.waitFor(entry))) {
          return { abort: true, reason: 'payment_in_progress', message: 'this payment is being served for an earlier request; retry later' };
        }
        continue;
      }
      // The served token was verified by the gateway; another one with its jti is a forgery.
      if (entry.attestation !== presentation.attestation) {
        return { abort: true, reason: 'attestation_invalid', message: 'another attestation with this jti was presented to this server' };
      }
      // Another resource: the gateway refuses it (resource_mismatch); it is not this outcome's repeat.
      if (entry.resource !== presentation.resource) return undefined;
      const sameRequest = entry.request !== undefined && entry.request === presentation.request;
      const verified = { skip: true as const, result: { isValid: true, ...(entry.payer ? { payer: entry.payer } : {}) } };
      if (entry.phase === 'unsettled') {
        // The agent got nothing for it: the same request gets the kept answer, any other runs; either settles again
        // and gets the capture (the identical token was verified by the gateway when first presented, and may since be
        // settled, so it is not asked again). Taken up, so that a repeat arriving meanwhile waits (found from outside:
        // the same request and another at one moment both got an answer for one payment).
        const replay = sameRequest && entry.response !== undefined;
        this.takeUp(entry, presentation, context.paymentPayload, !replay);
        (replay ? this.repeats : this.owners).set(context.paymentPayload, entry);
        if (!replay) this.reruns.add(context.paymentPayload);
        return verified;
      }
      if (!sameRequest) {
        // Its own reason, so that the agent's client keeps the payment for the request it paid for, and pays anew for this one.
        return { abort: true, reason: PAID_FOR_ANOTHER_REQUEST, message: 'this payment paid for another request to this resource; pay again for this one' };
      }
      if (!entry.response) {
        return { abort: true, reason: 'already_settled', message: 'this payment was served and settled; its response cannot be replayed' };
      }
      this.repeats.set(context.paymentPayload, entry);
      return verified;
    }
  };

  private readonly afterVerify: AfterVerifyHook = async (context) => {
    const repeat = this.repeats.get(context.paymentPayload);
    if (repeat?.response) return { skipHandler: true, response: repeat.response };
    const owned = this.owners.get(context.paymentPayload);
    if (!owned) return undefined;
    if (!context.result.isValid) this.drop(owned);
    else if (context.result.payer) owned.payer = context.result.payer;
    return undefined;
  };

  private readonly onVerifyFailure: OnVerifyFailureHook = async (context) => {
    const owned = this.owners.get(context.paymentPayload);
    if (owned) this.drop(owned);
    return undefined;
  };

  private readonly beforeSettle: BeforeSettleHook = async (context) => {
    const repeat = this.repeats.get(context.paymentPayload);
    // A served outcome answers with its settlement; one this repeat took up settles again (the gateway answers a repeat of one jti alike).
    if (repeat?.phase === 'served' && repeat.settlement && repeat.claimant !== context.paymentPayload) return { skip: true, result: repeat.settlement };
    return undefined;
  };

  private readonly afterSettle: AfterSettleHook = async (context) => {
    const entry = this.owners.get(context.paymentPayload) ?? this.repeats.get(context.paymentPayload);
    if (!entry || this.entries.get(entry.jti) !== entry || this.takenOver(context.paymentPayload, entry)) return;
    // The answer of the request that ran (a repeat answered from the kept one keeps it).
    if (this.owners.has(context.paymentPayload)) entry.response = this.replayable(context.transportContext);
    entry.settlement = context.result as SettleResponse;
    entry.phase = 'served';
    entry.finish();
  };

  private readonly onSettleFailure: OnSettleFailureHook = async (context) => {
    const entry = this.owners.get(context.paymentPayload) ?? this.repeats.get(context.paymentPayload);
    if (!entry || this.entries.get(entry.jti) !== entry || this.takenOver(context.paymentPayload, entry)) return undefined;
    // The gateway answered (SettleError): nothing was charged, nothing is replayed; its refusal stands for a repeat too.
    if (context.error instanceof SettleError) {
      this.drop(entry);
      return undefined;
    }
    // No answer (a timeout, a lost connection): the capture may have happened. Keep the outcome, and the handler's
    // response when it can be replayed: the same request again gets it once a settle goes through (the gateway
    // answers a second settle of one jti with the first's result); another request, or one whose answer was not
    // kept, runs again and settles again (found from outside: an answer that could not be kept was dropped, its
    // repeat refused already_settled, and the agent's next attempt paid a second time).
    if (this.owners.has(context.paymentPayload)) entry.response = this.replayable(context.transportContext);
    entry.phase = 'unsettled';
    entry.finish();
    return undefined;
  };

  private readonly onVerifiedPaymentCanceled: OnVerifiedPaymentCanceledHook = async (context) => {
    const owned = this.owners.get(context.paymentPayload);
    if (!owned) return;
    if (this.reruns.has(context.paymentPayload) && owned.claimant === context.paymentPayload && this.entries.get(owned.jti) === owned) {
      // The agent still got nothing for a payment that may be captured: it stays open for its next request (found from
      // outside: dropped, its release refused as captured, and the agent's next attempt paid again).
      owned.phase = 'unsettled';
      owned.finish();
      return;
    }
    this.drop(owned);
  };

  /** The hooks, as a scheme server exposes them (`schemeHooks`). */
  readonly hooks = {
    onBeforeVerify: this.beforeVerify,
    onAfterVerify: this.afterVerify,
    onVerifyFailure: this.onVerifyFailure,
    onBeforeSettle: this.beforeSettle,
    onAfterSettle: this.afterSettle,
    onSettleFailure: this.onSettleFailure,
    onVerifiedPaymentCanceled: this.onVerifiedPaymentCanceled,
  };
}
