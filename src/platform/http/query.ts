// The HTTP face of a query: one route whose path parameters, query string (GET) or body (POST) together
// are the query's input, whose 200 is the query's output, and whose handler runs the query runner. The
// route's operationId is the query's name, as an operation's is.
import type { FastifyRequest, RouteOptions } from 'fastify';
import { Type, type TObject, type TSchema } from '@sinclair/typebox';
import { runQuery, type Query, type QueryDescription } from '../queries.ts';
import type { AuthRequirement } from './auth.ts';
import { principalOf } from './auth.ts';
import { problems } from './openapi.ts';
import { versionHeaders } from './versions.ts';

export interface QueryRouteOptions {
  auth: AuthRequirement;
  tags: string[];
  summary: string;
  description?: string;
  /** Failure statuses the query answers with a problem body (401 and 403 come with `auth`). */
  errors?: number[];
  /** The answer shows a version of the resource: its `ETag` names it (versions.ts), documented with the route. */
  versioned?: boolean;
  /** Body members relayed from another party, which the query judges itself (the route config's `relayedBody`). */
  relayedBody?: readonly string[];
}

const PATH_PARAMETER = /:([A-Za-z0-9_]+)/g;

/** The input's members named in the path, and the rest (with the input's own options: examples, strictness). */
export function splitInput(input: TSchema, url: string): { params?: TObject; rest?: TObject } {
  const object = input as TObject;
  const names = new Set([...url.matchAll(PATH_PARAMETER)].map((match) => match[1]!));
  const pick = (inPath: boolean) => Object.fromEntries(Object.entries(object.properties).filter(([name]) => names.has(name) === inPath));
  const { $id: _id, type: _type, properties: _properties, required: _required, ...options } = object as TObject & Record<string, unknown>;
  const params = pick(true);
  const rest = pick(false);
  return {
    params: Object.keys(params).length > 0 ? Type.Object(params) : undefined,
    rest: Object.keys(rest).length > 0 ? Type.Object(rest, options) : undefined,
  };
}

/** The whole input of a request: its path parameters plus its query string or body. */
function inputOf(request: FastifyRequest): Record<string, unknown> {
  const part = request.method === 'GET' ? request.query : request.body;
  return { ...(part as Record<string, unknown> | undefined), ...(request.params as Record<string, unknown>) };
}

/** A route that is the HTTP face of `query` (register it with `app.route`). */
export function queryRoute(method: 'GET' | 'POST', url: string, query: Query<any, any, any>, options: QueryRouteOptions): RouteOptions {
  const { params, rest } = splitInput(query.input, url);
  const description: QueryDescription = query;
  return {
    method,
    url,
    config: {
      auth: options.auth,
      query: description,
      ...(options.versioned ? { versioned: true } : {}),
      ...(options.relayedBody ? { relayedBody: options.relayedBody } : {}),
    },
    schema: {
      operationId: query.name,
      tags: options.tags,
      summary: options.summary,
      ...(options.description ? { description: options.description } : {}),
      ...(params ? { params } : {}),
      ...(rest ? (method === 'GET' ? { querystring: rest } : { body: rest }) : {}),
      response: { 200: query.output, ...problems(...(options.errors ?? [])) },
    },
    handler: async (request, reply) => {
      const result = await runQuery(request.server.gateway, query, { principal: principalOf(request), input: inputOf(request) });
      if (options.versioned) reply.headers(versionHeaders(result as { version: number }));
      return result;
    },
  };
}
