// Helpers for the MCP tests: the official client on either protocol era with a fixed bearer token, and
// raw JSON-RPC POSTs for the wire rules the client would never break.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

export const MODERN = '2026-07-28';
export const LEGACY = '2025-11-25';

export async function connect(url: string, token: string, era: 'modern' | 'legacy'): Promise<Client> {
  const client = new Client(
    { name: 'acg-test', version: '1.0.0' },
    era === 'modern' ? { versionNegotiation: { mode: { pin: MODERN } } } : { versionNegotiation: { mode: 'legacy' } },
  );
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), { authProvider: { token: async () => token } });
  await client.connect(transport);
  return client;
}

/** The `_meta` envelope every 2026-07-28 request carries. */
export function envelope(): Record<string, unknown> {
  return {
    'io.modelcontextprotocol/protocolVersion': MODERN,
    'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' },
    'io.modelcontextprotocol/clientCapabilities': {},
  };
}

export interface RawAnswer {
  status: number;
  headers: Headers;
  body: any;
}

/** One modern JSON-RPC request with the headers the transport rules require (override any of them). */
export async function rawModern(
  url: string,
  method: string,
  params: Record<string, unknown> = {},
  options: { token?: string; headers?: Record<string, string | undefined> } = {},
): Promise<RawAnswer> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': MODERN,
    'mcp-method': method,
  };
  if (typeof params.name === 'string') headers['mcp-name'] = params.name;
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  for (const [name, value] of Object.entries(options.headers ?? {})) {
    if (value === undefined) delete headers[name];
    else headers[name] = value;
  }
  const res = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: { ...params, _meta: envelope() } }),
  });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    // an SSE stream or an empty body
  }
  return { status: res.status, headers: res.headers, body };
}

/**
 * What a tool answered: its structured content, or for a refusal the problem body. A read's refusal carries the body
 * as its text alone (its output schema describes success only), an operation's as both.
 */
export function toolBody(result: unknown): any {
  const { structuredContent, isError, content } = result as { structuredContent?: unknown; isError?: boolean; content?: Array<{ type: string; text?: string }> };
  if (structuredContent !== undefined) return structuredContent;
  return isError === true && content?.[0]?.type === 'text' ? JSON.parse(content[0].text!) : undefined;
}
