// Documentation served by the gateway: the OpenAPI 3.1 document, an API reference page, and the error
// catalogue that every problem `type` URI points into.
import { createHash } from 'node:crypto';
import { REFUSAL_REASONS } from '../platform/reasons.ts';
import type { FastifyInstance } from 'fastify';
import swaggerUi from '@fastify/swagger-ui';
import { webhooksDocument } from '../events/catalogue.ts';
import { ERROR_CATALOGUE } from '../platform/errors.ts';
import { bodyMayBeLeftOut } from '../platform/http/operation.ts';
import { HtmlPage, newNonce, pageHeaders } from '../platform/http/pages.ts';
import { INVALID_REASONS, SETTLE_ERROR_REASONS, X402_REASON_MEANINGS } from '../x402/schemas.ts';

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

type Operations = Record<string, { requestBody?: { required?: boolean; content?: Record<string, { schema?: unknown }> } }>;

/** The document with `requestBody.required: false` on every operation whose body may be left out. */
function optionalBodies(document: Record<string, unknown>): Record<string, unknown> {
  const paths = document.paths as Record<string, Operations> | undefined;
  if (!paths) return document;
  const marked = Object.fromEntries(
    Object.entries(paths).map(([path, operations]) => [
      path,
      Object.fromEntries(
        Object.entries(operations).map(([method, operation]) => {
          const body = operation.requestBody?.content?.['application/json']?.schema;
          return [method, body !== undefined && bodyMayBeLeftOut(method.toUpperCase(), body) ? { ...operation, requestBody: { ...operation.requestBody, required: false } } : operation];
        }),
      ),
    ]),
  );
  return { ...document, paths: marked };
}


/**
 * Codes answered with another status somewhere, as the spec's error table lists them: the catalogue's row says where
 * (found from outside: it said 402 alone once execute answered 403; `uncharged`, `src/execute/execution.ts`).
 */
/** The API reference's CSP: Swagger UI's own files and the document, from this origin only; never framed. */
const API_REFERENCE_CSP = [
  "default-src 'self'",
  "base-uri 'none'",
  "font-src 'self' data:",
  "frame-ancestors 'none'",
  "img-src 'self' data:",
  "object-src 'none'",
  "script-src 'self'",
  "script-src-attr 'none'",
  "style-src 'self'",
  "form-action 'none'",
].join('; ');

const ALSO_ANSWERED: Readonly<Record<string, string>> = { CAP_EXCEEDED: '403 on POST /v1/services/execute' };

export async function docsRoutes(app: FastifyInstance): Promise<void> {
  // The routes' document plus the event catalogue (OpenAPI 3.1 `webhooks`), which no route declares; and a body the
  // platform lets a request leave out (`bodyMayBeLeftOut`) is not required, which the swagger plugin always says it is.
  const withWebhooks = (document: Record<string, unknown>) => ({ ...optionalBodies(document), webhooks: webhooksDocument() });
  const tags = ['docs'];
  // The document is fixed once the routes are: made and hashed at the first request, then served as it is, with an
  // ETag a client revalidates (found from outside: 568 KB sent again on every read, with no validator).
  let served: { body: string; etag: string } | undefined;
  const document = () => {
    if (served === undefined) {
      const body = JSON.stringify(withWebhooks(app.swagger() as unknown as Record<string, unknown>));
      served = { body, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"` };
    }
    return served;
  };
  app.get('/openapi.json', {
    config: { skipRateLimit: true },
    schema: {
      operationId: 'getOpenApiDocument',
      tags,
      summary: 'This document (OpenAPI 3.1), with the webhook events it sends',
      description: 'With `ETag` and `Cache-Control: no-cache`: a request with `If-None-Match` naming the current ETag is answered 304 without the document.',
      response: {
        200: {
          description: 'the OpenAPI 3.1 document',
          headers: { ETag: { type: 'string', description: "the document's version (it changes with the gateway's release and configuration)" } },
          content: { 'application/json': { schema: { type: 'object', additionalProperties: true } } },
        },
        304: { description: 'the document the client holds (If-None-Match) is the current one (no body)', type: 'null', headers: { ETag: { type: 'string', description: "the document's version" } } },
      },
    },
    handler: async (request, reply) => {
      const { body, etag } = document();
      reply.header('etag', etag).header('cache-control', 'no-cache');
      const known = request.headers['if-none-match'];
      if (known !== undefined && known.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag || tag.trim() === '*')) return reply.code(304).send();
      return reply.type('application/json; charset=utf-8').send(body);
    },
  });

  // The API reference page is in the document; the rest of Swagger UI's routes (its scripts and styles, the document
  // again at /docs/json and /docs/yaml, /docs/ with the slash, which its relative links need) stay out of it: they serve
  // the page, not a client (docs/decisions.md "Every route the gateway answers is in its document").
  app.addHook('onRoute', (route) => {
    if (route.url !== '/docs' || route.method !== 'GET') return;
    route.schema = {
      operationId: 'showApiReference',
      tags,
      summary: 'The API reference (HTML): this document in Swagger UI',
      response: {
        200: HtmlPage('the API reference'),
        302: { description: 'a query string was given: to /docs without it (the page reads none); no body', type: 'null', headers: { Location: { type: 'string', description: '/docs' } } },
      },
    };
  });
  // Swagger UI's page finds the document from its own address (`location.href + '/./json'`), which a query string
  // breaks ("Unable to render this definition"), and its redirect of /docs/static/index.html keeps the query and so
  // answers itself forever (found from outside: a shared link with a tracking parameter). The page reads no query
  // (its deep links are fragments), so one is dropped by a redirect to the page without it. Its static folder's own
  // index (/docs/static/) looks for the document beside it, where there is none: the page is at /docs.
  app.addHook('onRequest', async (request, reply) => {
    if (request.method !== 'GET' && request.method !== 'HEAD') return;
    const at = request.url.indexOf('?');
    const path = at === -1 ? request.url : request.url.slice(0, at);
    if (path === '/docs' || path.startsWith('/docs/')) reply.header('x-frame-options', 'DENY').header('referrer-policy', 'no-referrer').header('x-content-type-options', 'nosniff');
    if (path === '/docs/static/' || (at !== -1 && (path === '/docs' || path === '/docs/' || path === '/docs/static/index.html'))) return reply.redirect('/docs', 302);
  });
  // Swagger UI's page and files carry what every other page does: no framing, no referrer, no sniffing (found from
  // outside: its own CSP allowed framing by this origin and style sheets from anywhere, and it alone had no
  // X-Frame-Options or Referrer-Policy). It loads its scripts, styles and fonts from this origin only.
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    uiConfig: { docExpansion: 'list', deepLinking: true, defaultModelsExpandDepth: 0 },
    staticCSP: API_REFERENCE_CSP,
    theme: { title: 'Agent Credit Gateway API' },
    transformSpecification: (document) => withWebhooks(document),
  });

  app.get('/docs/errors', {
    schema: {
      operationId: 'showErrorCatalogue',
      tags,
      summary: 'The error catalogue (HTML): where every problem `type` points',
      description: 'One row per problem `code`, with its status and title; each row is the fragment its `type` URI names (`/docs/errors#{code}`). Then one row per `reason` a refusal may carry beside its code (`/docs/errors#reason-{reason}`), and the x402 facilitator\'s reasons (`#x402-{reason}`).',
      response: { 200: HtmlPage('the error catalogue') },
    },
    handler: async (_request, reply) => {
      const rows = Object.entries(ERROR_CATALOGUE)
        .map(([code, e]) => `<tr id="${code}"><td><code>${code}</code></td><td>${e.status}${code in ALSO_ANSWERED ? ` (${escapeHtml(ALSO_ANSWERED[code]!)})` : ''}</td><td>${escapeHtml(e.title)}</td></tr>`)
        .join('\n');
      const x402Rows = Object.entries(X402_REASON_MEANINGS)
        .map(([reason, meaning]) => {
          const answers = [(INVALID_REASONS as readonly string[]).includes(reason) ? 'verify' : '', (SETTLE_ERROR_REASONS as readonly string[]).includes(reason) ? 'settle' : ''].filter(Boolean).join(', ');
          return `<tr id="x402-${reason}"><td><code>${reason}</code></td><td>${answers}</td><td>${escapeHtml(meaning)}</td></tr>`;
        })
        .join('\n');
      const reasonRows = Object.entries(REFUSAL_REASONS)
        .map(([reason, r]) => `<tr id="reason-${reason}"><td><code>${reason}</code></td><td>${r.codes.map((code) => `<a href="#${code}"><code>${code}</code></a>`).join(', ')}</td><td>${escapeHtml(r.meaning)}</td></tr>`)
        .join('\n');
      // The headers of every page (found from outside: this one alone could be framed, and had no CSP).
      const nonce = newNonce();
      reply.headers(pageHeaders(nonce));
      return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Error catalogue · Agent Credit Gateway</title>
<style nonce="${nonce}">body{font-family:system-ui,sans-serif;margin:2rem;max-width:60rem}td,th{padding:.3rem .8rem;text-align:left;border-bottom:1px solid #ddd}:target{background:#fff3b0}</style>
</head><body><h1>Error catalogue</h1>
<p>API routes answer failures with <code>application/problem+json</code> bodies (<code>type</code>, <code>title</code>, <code>status</code>, <code>code</code>, often <code>detail</code>). The <code>code</code> is stable; branch on it. OAuth routes use the RFC 6749 error body instead.</p>
<table><thead><tr><th>code</th><th>status</th><th>meaning</th></tr></thead><tbody>
${rows}
</tbody></table>
<h2 id="reasons">Reasons</h2>
<p>Some refusals carry a <code>reason</code> member beside their <code>code</code>: which rule refused, or why a request closed. It is stable too; branch on it.</p>
<table><thead><tr><th>reason</th><th>with code</th><th>meaning</th></tr></thead><tbody>
${reasonRows}
</tbody></table>
<h2 id="x402">x402 reasons</h2>
<p>The x402 facilitator (<code>POST /x402/verify</code>, <code>POST /x402/settle</code>) answers 200 with <code>isValid</code> or <code>success</code> false and one reason (<code>invalidReason</code>, <code>errorReason</code>) instead of a problem body, as x402 asks. A malformed request is still a 400 problem.</p>
<table><thead><tr><th>reason</th><th>answered by</th><th>meaning</th></tr></thead><tbody>
${x402Rows}
</tbody></table><p><a href="/docs">API reference</a></p></body></html>`;
    },
  });
}
