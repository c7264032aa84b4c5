// How CLI commands reach a running gateway: HTTP to ACG_BASE_URL with the operator credential.
import { randomUUID } from 'node:crypto';

const REQUEST_TIMEOUT_MS = 15_000;

/** Nothing answers at the base URL: the gateway is not running there. */
export class GatewayNotRunning extends Error {
  constructor(readonly baseUrl: string, options?: { cause?: unknown }) {
    super(`no gateway answers at ${baseUrl}`, options);
    this.name = 'GatewayNotRunning';
  }
}

export interface GatewayAnswer {
  status: number;
  body: Record<string, unknown>;
}

/** One JSON request; mutating requests carry a fresh Idempotency-Key, so the gateway applies them once. */
export async function callGateway(baseUrl: string, token: string, method: 'GET' | 'POST', path: string, body?: unknown): Promise<GatewayAnswer> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method === 'POST') headers['idempotency-key'] = randomUUID();
  let response: Response;
  try {
    response = await fetch(`${baseUrl}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
  } catch (error) {
    const code = (error as { cause?: { code?: string } }).cause?.code;
    if (code === 'ECONNREFUSED') throw new GatewayNotRunning(baseUrl, { cause: error });
    throw new Error(`cannot reach the gateway at ${baseUrl}: ${code ?? (error as Error).message}`, { cause: error });
  }
  const text = await response.text();
  let parsed: Record<string, unknown>;
  try {
    parsed = text === '' ? {} : (JSON.parse(text) as Record<string, unknown>);
  } catch {
    throw new Error(`the gateway at ${baseUrl} answered ${method} ${path} with HTTP ${response.status} and a body that is not JSON`);
  }
  return { status: response.status, body: parsed };
}

/** One line for a problem body: its code and detail. */
export function describeProblem(answer: GatewayAnswer): string {
  const { code, detail, title } = answer.body as { code?: string; detail?: string; title?: string };
  return `HTTP ${answer.status} ${code ?? ''}${detail || title ? `: ${detail ?? title}` : ''}`.trim();
}
