// A tool and the HTTP route of the same operation or query (the route whose operationId is its name) take
// the same input: the tool's schema (minus its idempotencyKey) has exactly the members of the route's path
// parameters, query and body, each with the same schema. A read tool's output schema is its route's 200
// schema. This fails as soon as one face's definition changes without the other. A schema with a oneOf at
// its root is compared as both faces' published forms (flattened), so execute's per-action inputs are
// compared through their descriptions' absence: the enums of services and actions are what this checks there.
// Each caller is shown its own form: a member the route marks for other kinds of caller (`x-principal-kinds`, execute's
// `agentId`, an owner's alone) is left out of the tool a caller of another kind lists.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { publishedInputJson } from '../../src/mcp/published-schema.ts';
import { TOOLS, twinName } from '../../src/mcp/tools.ts';
import { startWorld, type World } from '../support/world.ts';
import { rawModern } from './helpers.ts';

let world: World;
let openapi: any;
/** Each tool's input as the callers listing it are shown it, by the caller's kind. */
const advertised = new Map<string, Map<'agent' | 'human', any>>();
const advertisedOutput = new Map<string, any>();
const KINDS_KEYWORD = 'x-principal-kinds';

/**
 * Without documentation-only keywords, keys sorted, so two equal schemas print the same; `const: x` as
 * `enum: [x]`, the form the OpenAPI document writes it in.
 */
function normalised(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(normalised);
  if (schema === null || typeof schema !== 'object') return schema;
  const entries = Object.entries(schema)
    .map(([name, value]): [string, unknown] => (name === 'const' ? ['enum', [value]] : [name, value])).filter(([name]) => !['description', 'examples', 'title', '$id', '$schema', KINDS_KEYWORD].includes(name));
  return Object.fromEntries(entries.sort(([a], [b]) => a.localeCompare(b)).map(([name, value]) => [name, normalised(value)]));
}

function resolve(schema: any): any {
  const ref = schema?.$ref as string | undefined;
  return ref ? resolve(openapi.components.schemas[ref.replace('#/components/schemas/', '')]) : schema;
}

/** `schema` with every reference resolved, all the way down (the tools inline what the document names). */
function resolvedDeep(schema: any): any {
  if (Array.isArray(schema)) return schema.map(resolvedDeep);
  if (schema === null || typeof schema !== 'object') return schema;
  if (typeof schema.$ref === 'string') return resolvedDeep(resolve(schema));
  return Object.fromEntries(Object.entries(schema).map(([name, value]) => [name, resolvedDeep(value)]));
}

/** The route whose operationId is `name`: the HTTP twin of a tool. */
function routeNamed(name: string): any {
  for (const methods of Object.values<any>(openapi.paths)) {
    for (const operation of Object.values<any>(methods)) if (operation?.operationId === name) return operation;
  }
  throw new Error(`no route with operationId ${name} in /openapi.json`);
}

/** The route's whole input as one object schema (path and query parameters plus body members), the members a caller of `kind` may send. */
function routeInput(name: string, kind: 'agent' | 'human'): { properties: Record<string, unknown>; required: string[] } {
  const operation = routeNamed(name);
  const properties: Record<string, unknown> = {};
  const required: string[] = [];
  for (const parameter of operation.parameters ?? []) {
    if (parameter.in !== 'path' && parameter.in !== 'query') continue;
    properties[parameter.name] = parameter.schema;
    if (parameter.required) required.push(parameter.name);
  }
  // A body with a oneOf at its root (execute's) is published flattened, as the tool's is (server.ts).
  const declared = resolve(operation.requestBody?.content?.['application/json']?.schema);
  const body = declared ? publishedInputJson(resolvedDeep(declared)) : undefined;
  for (const [name, schema] of Object.entries(body?.properties ?? {})) properties[name] = resolve(schema);
  required.push(...(body?.required ?? []));
  const hidden = Object.keys(properties).filter((member) => {
    const kinds = (properties[member] as Record<string, unknown>)[KINDS_KEYWORD];
    return Array.isArray(kinds) && !kinds.includes(kind);
  });
  for (const member of hidden) delete properties[member];
  return { properties, required: required.filter((member) => !hidden.includes(member)) };
}

beforeAll(async () => {
  world = await startWorld();
  openapi = (await world.api('GET', '/openapi.json')).body;
  const agent = await world.createAgent('drift@example.com', 'drift-agent');
  const agentToken = await world.accessToken({ sub: agent.id, scope: 'svc:agent' }, `${world.url}/mcp`);
  // An agent whose mandate allows delegates also sees the tools that require it (create_delegate).
  const delegating = await world.createAgent('drift@example.com', 'drift-delegating');
  const allowed = await world.api('PUT', `/v1/owner/agents/${delegating.id}/mandate`, { token: delegating.ownerToken, key: 'drift-delegation', body: { delegation: { allowed: true, maxDepth: 1 } } });
  if (allowed.status !== 200) throw new Error(`mandate refused: ${JSON.stringify(allowed.body)}`);
  const delegatingToken = await world.accessToken({ sub: delegating.id, scope: 'svc:agent' }, `${world.url}/mcp`);
  for (const [kind, token] of [['agent', agentToken], ['agent', delegatingToken], ['human', agent.ownerToken]] as const) {
    for (const tool of (await rawModern(world.url, 'tools/list', {}, { token })).body.result.tools) {
      advertised.set(tool.name, (advertised.get(tool.name) ?? new Map()).set(kind, tool.inputSchema));
      advertisedOutput.set(tool.name, tool.outputSchema);
    }
  }
});

afterAll(async () => {
  await world?.close();
});

/**
 * Tool members whose HTTP twin is a header, not a member: a mandate's `ifVersion` is If-Match (its version as a
 * strong entity tag). The route must document that header; the member's schema is the operation's.
 */
const HEADER_TWINS: Record<string, string> = { ifVersion: 'If-Match' };

describe('tool input schemas match their HTTP routes', () => {
  it('every tool is advertised to someone', () => {
    expect([...advertised.keys()].sort()).toEqual(TOOLS.map((tool) => tool.name).sort());
  });

  for (const tool of TOOLS) {
    it(`${tool.name} ↔ ${twinName(tool)}`, () => {
      for (const [kind, input] of advertised.get(tool.name)!) {
        const { idempotencyKey: _key, ...advertisedProperties } = input.properties ?? {};
        const headerTwins = Object.keys(advertisedProperties).filter((name) => name in HEADER_TWINS);
        const headers = (routeNamed(twinName(tool)).parameters ?? []).filter((parameter: { in: string }) => parameter.in === 'header').map((parameter: { name: string }) => parameter.name);
        for (const name of headerTwins) expect(headers, `${tool.name}.${name} is ${HEADER_TWINS[name]} over HTTP`).toContain(HEADER_TWINS[name]);
        const toolProperties = Object.fromEntries(Object.entries(advertisedProperties).filter(([name]) => !headerTwins.includes(name)));
        const toolRequired = ((input.required ?? []) as string[]).filter((name) => name !== 'idempotencyKey' && !headerTwins.includes(name));
        const route = routeInput(twinName(tool), kind);
        expect(Object.keys(toolProperties).sort(), `${tool.name} as ${kind}s list it`).toEqual(Object.keys(route.properties).sort());
        expect(toolRequired.sort()).toEqual(route.required.sort());
        for (const [name, schema] of Object.entries(route.properties)) {
          expect(normalised(toolProperties[name]), `${tool.name}.${name}`).toEqual(normalised(schema));
        }
        expect(JSON.stringify(input), `${tool.name}: the keyword is resolved for the caller, not shown`).not.toContain(KINDS_KEYWORD);
      }
    });
  }
});

describe('a caller is shown only the members it may send', () => {
  it("an agent's execute_service lists no agentId, which only an owner names (an agent acts as itself); an owner's does", () => {
    expect(Object.keys(advertised.get('execute_service')!.get('agent').properties)).not.toContain('agentId');
    expect(Object.keys(advertised.get('execute_service')!.get('human').properties)).toContain('agentId');
    // request_topup's agentId is every caller's: an agent names itself, as over HTTP, where it is required.
    expect(advertised.get('request_topup')!.get('agent').required).toContain('agentId');
  });
});

describe('read tools declare their HTTP route\'s answer as their output schema', () => {
  for (const tool of TOOLS.filter((t) => 'query' in t)) {
    it(`${tool.name} → ${twinName(tool)} 200`, () => {
      const answerOf = (name: string) => resolvedDeep(routeNamed(name).responses['200'].content['application/json'].schema);
      expect(advertisedOutput.get(tool.name), `${tool.name} has an outputSchema`).toBeDefined();
      // get_intent also reads a purchase approval (pur_…): its answer is either route's 200.
      const expected = 'readsPurchaseApprovals' in tool && tool.readsPurchaseApprovals ? { type: 'object', anyOf: [answerOf(twinName(tool)), answerOf('getPurchaseApproval')] } : answerOf(twinName(tool));
      expect(normalised(advertisedOutput.get(tool.name))).toEqual(normalised(expected));
    });
  }
});
