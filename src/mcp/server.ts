// The MCP face: one stateless handler for both protocol eras (2026-07-28 per-request envelopes and the
// legacy 2025-11-25 `initialize` form). Each request gets a fresh McpServer holding the tools its
// verified principal may call, so a tool list depends on who asks (cache scope `private`). Tool calls
// run the same services as the HTTP routes; a business refusal comes back as a tool error (`isError`)
// whose structured content is the same problem body the HTTP route answers.
import { createMcpHandler, fromJsonSchema, McpServer, type CallToolResult, type McpHttpHandler } from '@modelcontextprotocol/server';
import type { TSchema } from '@sinclair/typebox';
import { ApiError, problemBody } from '../platform/errors.ts';
import type { Principal } from '../platform/principal.ts';
import { principalFrom } from './auth.ts';
import { TOOLS, type ToolDefinition, type ToolServices } from './tools.ts';

export const MCP_SERVER_INFO = { name: 'agent-credit-gateway', version: '0.1.0' };

const INSTRUCTIONS =
  'Agent Credit Gateway: agents pay for services with prepaid credit. Amounts are microcredits as decimal strings ' +
  '(1 credit = 1,000,000 µc = $0.01). Tools that move money take an idempotencyKey: retry a failed call with the same key. ' +
  'A refused call is a tool error whose structured content is an RFC 9457 problem with a stable `code`.';

/** The tool's input schema as the SDK takes it: the TypeBox definition is already JSON Schema. */
export function inputSchemaOf(schema: TSchema) {
  return fromJsonSchema<Record<string, unknown>>(JSON.parse(JSON.stringify(schema)) as Record<string, unknown>);
}

function toolResult(body: object): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(body) }], structuredContent: body as Record<string, unknown> };
}

async function call(services: ToolServices, tool: ToolDefinition, principal: Principal, input: unknown): Promise<CallToolResult> {
  try {
    return toolResult(await tool.run(services, principal, input as never));
  } catch (error) {
    if (!(error instanceof ApiError)) {
      services.gateway.log.error({ err: error, tool: tool.name }, 'MCP tool failed');
      error = new ApiError('internal_error', { detail: 'an unexpected error occurred; it has been logged' });
    }
    return { ...toolResult(problemBody(services.gateway.config.baseUrl, error as ApiError)), isError: true };
  }
}

export function buildMcpServer(services: ToolServices, principal: Principal): McpServer {
  const server = new McpServer(MCP_SERVER_INFO, {
    instructions: INSTRUCTIONS,
    capabilities: { tools: { listChanged: false } },
    // The tool list depends on the credential: never share a cached copy across callers.
    cacheHints: { 'tools/list': { ttlMs: 0, cacheScope: 'private' }, 'server/discover': { ttlMs: 0, cacheScope: 'private' } },
  });
  for (const tool of TOOLS) {
    if (!tool.kinds.includes(principal.kind)) continue;
    server.registerTool(
      tool.name,
      { title: tool.title, description: tool.description, inputSchema: inputSchemaOf(tool.input), annotations: tool.annotations },
      (input: Record<string, unknown>) => call(services, tool, principal, input),
    );
  }
  return server;
}

export function createGatewayMcpHandler(services: ToolServices, options: { maxRequestBodySize: number }): McpHttpHandler {
  return createMcpHandler(({ authInfo }) => buildMcpServer(services, principalFrom(authInfo)), {
    legacy: 'stateless',
    responseMode: 'auto',
    maxRequestBodySize: options.maxRequestBodySize,
    onerror: (error) => services.gateway.log.info({ err: error }, 'MCP request refused'),
  });
}
