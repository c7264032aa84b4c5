// A gateway wired to two real local identity providers, with helpers to make owners, agents and
// credentials of every kind. Most feature tests start from here.
import type { FastifyPluginAsync } from 'fastify';
import { startIssuer, type TestIssuer } from './issuer.ts';
import { startTestGateway, type TestGateway, type TestGatewayOptions } from './gateway.ts';
import type { TestDatabase } from './database.ts';

export interface World {
  gw: TestGateway;
  human: TestIssuer;
  agentIssuer: TestIssuer;
  url: string;
  humanToken(email: string, options?: { subject?: string; verified?: boolean }): Promise<string>;
  agentToken(subject: string, ownerEmail: string): Promise<string>;
  /** Registers an agent for the owner and returns its id and an agent identity token. */
  createAgent(ownerEmail: string, subject: string, settings?: Record<string, unknown>): Promise<{ id: string; token: string; ownerToken: string }>;
  /** Our own OAuth access token, as the token endpoint would issue it (an agent's with its owner's email, unless given). */
  accessToken(claims: { sub: string; scope: 'svc:agent' | 'svc:owner'; email?: string }, audience?: string): Promise<string>;
  api(method: string, path: string, options?: { token?: string; body?: unknown; key?: string; headers?: Record<string, string> }): Promise<ApiResponse>;
  /** A second gateway on the same database, trusting the same identity providers and merchant keys (the caller closes it). */
  anotherInstance(options?: Omit<TestGatewayOptions, 'database'>): Promise<TestGateway>;
  close(): Promise<void>;
}

export interface ApiResponse {
  status: number;
  headers: Headers;
  body: any;
}

let keyCounter = 0;

export async function startWorld(
  options: {
    env?: Record<string, string>;
    features?: FastifyPluginAsync[];
    database?: TestDatabase;
    /** Identity providers already running (e.g. also configured in a gateway process); close() closes them too. */
    issuers?: { human: TestIssuer; agent: TestIssuer };
  } & Pick<TestGatewayOptions, 'outbound' | 'log' | 'dependencies'> = {},
): Promise<World> {
  const human = options.issuers?.human ?? (await startIssuer());
  const agentIssuer = options.issuers?.agent ?? (await startIssuer());
  const gw = await startTestGateway({
    database: options.database,
    features: options.features,
    outbound: options.outbound,
    log: options.log,
    dependencies: options.dependencies,
    env: {
      ACG_HUMAN_ISSUER: human.issuer,
      ACG_AGENT_ISSUER: agentIssuer.issuer,
      ACG_API_KEY_PEPPER: 'test-pepper-test-pepper-test-pepper-0123',
      ...options.env,
    },
  });
  const api: World['api'] = async (method, path, opts = {}) => {
    const headers: Record<string, string> = { ...opts.headers };
    if (opts.token) headers.authorization = `Bearer ${opts.token}`;
    if (opts.body !== undefined) headers['content-type'] = 'application/json';
    if (opts.key) headers['idempotency-key'] = opts.key;
    const res = await fetch(`${gw.url}${path}`, { method, headers, body: opts.body === undefined ? undefined : JSON.stringify(opts.body) });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      // not JSON
    }
    return { status: res.status, headers: res.headers, body };
  };
  const humanToken: World['humanToken'] = (email, o = {}) =>
    human.mint({ sub: o.subject ?? `human-${email}`, email, email_verified: o.verified ?? true });
  const agentToken: World['agentToken'] = (subject, ownerEmail) => agentIssuer.mint({ sub: subject, owner_email: ownerEmail });
  /** The verified email of the agent's owner now, or undefined for no such agent. */
  const ownerEmailOf = async (agentId: string): Promise<string | undefined> => {
    const { rows } = await gw.gateway.db.query<{ email: string }>('SELECT o.email FROM agents a JOIN owners o ON o.id = a.owner_id WHERE a.id = $1', [agentId]);
    return rows[0]?.email;
  };
  return {
    gw,
    human,
    agentIssuer,
    url: gw.url,
    humanToken,
    agentToken,
    async createAgent(ownerEmail, subject, settings = {}) {
      const ownerToken = await humanToken(ownerEmail);
      const res = await api('POST', '/v1/owner/agents', {
        token: ownerToken,
        key: `create-agent-${++keyCounter}`,
        body: { name: subject, identity: { issuer: agentIssuer.issuer, subject }, ...settings },
      });
      if (res.status !== 201) throw new Error(`agent creation failed: ${res.status} ${JSON.stringify(res.body)}`);
      return { id: res.body.id, token: await agentToken(subject, ownerEmail), ownerToken };
    },
    async accessToken(claims, audience) {
      const nowS = Math.floor(Date.now() / 1000);
      // An agent's token carries its owner's verified email, as the authorization server issues it.
      const email = claims.email ?? (claims.scope === 'svc:agent' ? await ownerEmailOf(claims.sub) : undefined);
      return gw.gateway.signing.sign(
        {
          iss: gw.config.baseUrl,
          aud: audience ?? gw.config.baseUrl,
          sub: claims.sub,
          scope: claims.scope,
          actor_type: claims.scope === 'svc:agent' ? 'agent' : 'owner',
          client_id: 'test-client',
          email,
          iat: nowS,
          exp: nowS + 600,
          jti: `test-${++keyCounter}`,
        },
        'at+jwt',
      );
    },
    api,
    anotherInstance: (options = {}) =>
      startTestGateway({
        ...options,
        database: gw.database,
        env: { ACG_HUMAN_ISSUER: human.issuer, ACG_AGENT_ISSUER: agentIssuer.issuer, ACG_API_KEY_PEPPER: gw.config.apiKeyPepper!, ...options.env },
      }),
    async close() {
      await gw.close();
      await human.close();
      await agentIssuer.close();
    },
  };
}
