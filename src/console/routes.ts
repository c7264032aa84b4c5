// HTTP edge of the owner console: the landing page (`/`), the console's shell at `/console` and every path
// under it (the console routes in the browser: /console/agents/{id}, the OAuth callback…), and its built
// files under /console/static/. The console itself is a public OAuth client of this gateway (its client is
// declared in src/oauth/console-client.ts) that uses only the public API.
import type { FastifyInstance, FastifyReply } from 'fastify';
import { Type, type Static } from '@sinclair/typebox';
import { CONSOLE_CLIENT_ID, consoleRedirectUri } from '../oauth/console-client.ts';
import { HtmlPage, newNonce, pageHeaders } from '../platform/http/pages.ts';
import { problems } from '../platform/http/openapi.ts';
import { PATH_PARAMETER_LENGTH_MAX, pathParameterTooLong } from '../platform/http/render-error.ts';
import { ApiError } from '../platform/errors.ts';
import { CONSOLE_STATIC_PATH, consoleBundleLoader, preferredEncoding, type ConsoleBundle } from './bundle.ts';
import { favicon } from './favicon.ts';
import { consoleHeaders, consoleShell, landingPage, notBuiltPage, type ConsoleSettings } from './pages.ts';


/**
 * A console address the gateway refuses (a path that is not valid percent-encoded UTF-8, a query with text it cannot
 * store): a page, as every refusal of a page for people is ("A page's refusals are pages").
 */
const CONSOLE_REFUSED = HtmlPage('a path that is not valid percent-encoded UTF-8, or a query with text the gateway refuses');

export interface ConsoleRouteDeps {
  /** How the owner signs in at the human identity provider for steps that need a human session. */
  humanSignIn: ConsoleSettings['humanSignIn'];
  /** The agent identity provider's issuer, read when the page is served (a built-in issuer follows the base URL). */
  agentIssuer: () => string | undefined;
}

// No pattern here: a name no built file has, of whatever shape, is 404 "no such console file" (a pattern made a
// mistyped name 400 with the schema's words, found from outside).
const FileParams = Type.Object({ file: Type.String({ description: 'a built file, named by its content: console-<hash>.js or .css' }) });

const STATIC_FOLDER = CONSOLE_STATIC_PATH.slice('/console/'.length);

/**
 * A path under the built files' folder that the file route did not take (a name over the router's limit, a nested
 * path, the folder itself) names no file: it is refused as the file route refuses, never answered with the shell
 * (a static URL answered 200 HTML, found from outside). A name over the limit is 414, as on every route.
 */
function refuseStaticPath(rest: string): void {
  if (rest !== STATIC_FOLDER && !rest.startsWith(`${STATIC_FOLDER}/`)) return;
  if (rest.split('/').some((segment) => segment.length > PATH_PARAMETER_LENGTH_MAX)) throw pathParameterTooLong();
  throw new ApiError('not_found', { detail: 'no such console file' });
}

/** Built files never change under their name: a year, immutable. */
const STATIC_HEADERS = { 'cache-control': 'public, max-age=31536000, immutable', 'x-content-type-options': 'nosniff', vary: 'accept-encoding' };

export function consoleRoutes(deps: ConsoleRouteDeps) {
  return async function routes(app: FastifyInstance): Promise<void> {
    const { config } = app.gateway;
    const bundle = consoleBundleLoader();
    const tags = ['console'];

    const settings = (): ConsoleSettings => ({
      issuer: config.baseUrl,
      clientId: CONSOLE_CLIENT_ID,
      redirectUri: consoleRedirectUri(config.baseUrl),
      resource: config.baseUrl,
      authorizationEndpoint: `${config.baseUrl}/oauth/authorize`,
      tokenEndpoint: `${config.baseUrl}/oauth/token`,
      revocationEndpoint: `${config.baseUrl}/oauth/revoke`,
      jwksUri: `${config.baseUrl}/.well-known/jwks.json`,
      agentIssuer: deps.agentIssuer(),
      mode: config.mode,
      humanSignIn: deps.humanSignIn,
    });

    const sendShell = async (reply: FastifyReply) => {
      const built: ConsoleBundle | undefined = await bundle();
      if (!built) {
        const nonce = newNonce();
        return reply.code(503).headers(pageHeaders(nonce)).send(notBuiltPage(nonce));
      }
      return reply.headers(consoleHeaders()).send(consoleShell(built, settings()));
    };

    // Pages for people, in the document as every route the gateway answers is (docs/decisions.md "Every route the
    // gateway answers is in its document").
    app.get('/', {
      schema: {
        operationId: 'showLandingPage',
        tags,
        summary: 'The landing page (HTML)',
        description: "What this gateway is, with links to the owner console, the API reference and the OpenAPI document.",
        response: { 200: HtmlPage('the landing page') },
      },
      handler: async (_request, reply) => {
        const nonce = newNonce();
        return reply.headers(pageHeaders(nonce)).send(landingPage(nonce, { baseUrl: config.baseUrl, mode: config.mode }));
      },
    });

    // What every browser asks for on every page of this origin.
    app.get('/favicon.ico', {
      schema: {
        operationId: 'getFavicon',
        tags,
        summary: "The gateway's icon, which browsers ask for on every page",
        response: { 200: { description: 'a PNG image (cached for a day)', content: { 'image/png': { schema: { type: 'string', contentMediaType: 'image/png' } } } } },
      },
      handler: (_request, reply) =>
        reply.headers({ 'content-type': 'image/png', 'cache-control': 'public, max-age=86400', 'x-content-type-options': 'nosniff' }).send(favicon()),
    });

    app.get('/console', {
      schema: {
        operationId: 'showConsole',
        tags,
        summary: 'The owner console (HTML)',
        description:
          'A single-page application: a public OAuth client of this gateway (client_id `acg-console`, PKCE S256, scope svc:owner, ' +
          'redirect URI `{base_url}/console/callback` exactly) that uses only this API. Every path under /console answers the same ' +
          "shell. Content-Security-Policy: scripts and styles of this origin only (no inline code), Trusted Types, frame-ancestors 'none'. " +
          '503 while the console is not built (`npm run build`).',
        response: { 200: HtmlPage('the console'), 400: CONSOLE_REFUSED, 503: HtmlPage('the console is not built, or the gateway is starting (waiting for its database) or stopping: try again after Retry-After') },
      },
      handler: (_request, reply) => sendShell(reply),
    });

    app.get('/console/*', {
      schema: {
        operationId: 'showConsoleAtPath',
        tags,
        summary: 'The owner console (HTML) at one of its own routes',
        description:
          'The console routes in the browser (`/console/agents/{id}`, `/console/callback` after sign-in, …): every path under ' +
          '/console/ answers the same shell as /console, and its script shows the view the path names. A path under ' +
          `${CONSOLE_STATIC_PATH}/ is a built file or nothing: one that names no file is 404 (414 for a name over ` +
          `${PATH_PARAMETER_LENGTH_MAX} characters), never the shell. 503 while the console is not built.`,
        params: Type.Object({ '*': Type.String({ description: 'the rest of the path, which may hold `/`: a route of the console' }) }),
        response: { 200: HtmlPage('the console'), 400: CONSOLE_REFUSED, ...problems(404, 414), 503: HtmlPage('the console is not built, or the gateway is starting (waiting for its database) or stopping: try again after Retry-After') },
      },
      handler: (request, reply) => {
        refuseStaticPath((request.params as { '*': string })['*']);
        return sendShell(reply);
      },
    });

    app.get(`${CONSOLE_STATIC_PATH}/:file`, {
      schema: {
        operationId: 'getConsoleFile',
        tags,
        summary: "One of the console's built files (script or style sheet)",
        description: 'Named by its content, so cached for a year; served brotli- or gzip-compressed when the request accepts it.',
        params: FileParams,
        response: { 200: { description: 'the file', content: { 'text/javascript': { schema: Type.String() }, 'text/css': { schema: Type.String() } } }, ...problems(404) },
      },
      handler: async (request, reply) => {
        const { file } = request.params as Static<typeof FileParams>;
        const asset = (await bundle())?.assets.get(file);
        if (!asset) throw new ApiError('not_found', { detail: 'no such console file' });
        const encoding = preferredEncoding(request.headers['accept-encoding']);
        reply.headers({ ...STATIC_HEADERS, 'content-type': asset.contentType });
        if (encoding !== 'identity') reply.header('content-encoding', encoding);
        return reply.send(asset.bodies[encoding]);
      },
    });
  };
}
