// The console's HTML: the shell every /console URL answers (the script and style sheet it loads, and what the
// script needs to know of this gateway, in one meta element), the page shown while the console is not built,
// and the landing page at `/`. The shell carries no data of any owner: everything it shows, the script reads
// from the API with the owner's token. Its policy allows no inline script or style at all: the script and
// the style sheet are files of this origin (with their SRI hashes), Trusted Types are required so that no
// string reaches an HTML sink, and nothing may frame it.
import { escapeHtml } from '../platform/http/pages.ts';
import type { ConsoleBundle } from './bundle.ts';

/** What the console's script reads from the shell (`<meta name="acg-console">`): facts of this gateway, no secret. */
export interface ConsoleSettings {
  issuer: string;
  clientId: string;
  /** Absent when the base URL cannot carry one (the console then explains why it cannot sign in). */
  redirectUri?: string;
  /** The API: the resource the console's tokens are for. */
  resource: string;
  authorizationEndpoint: string;
  tokenEndpoint: string;
  /** Where the console gives its token back when the owner signs out (RFC 7009). */
  revocationEndpoint: string;
  jwksUri: string;
  /** The agent identity provider whose identities agents are registered with (absent: none configured). */
  agentIssuer?: string;
  mode: 'dev' | 'live';
  /** How a person signs in as the human owner for the steps that need a human session (approving a top-up). */
  humanSignIn: { kind: 'dev'; url: string } | { kind: 'token'; issuer: string } | { kind: 'none' };
}

/** The shell's headers: no inline script or style, Trusted Types, no framing, no referrer (a callback URL carries a code). */
export function consoleHeaders(): Record<string, string> {
  return {
    'content-type': 'text/html; charset=utf-8',
    'content-security-policy': [
      "default-src 'none'",
      "script-src 'self'",
      "style-src 'self'",
      "connect-src 'self'",
      "img-src 'self'",
      "form-action 'none'",
      "base-uri 'none'",
      "frame-ancestors 'none'",
      "require-trusted-types-for 'script'",
      "trusted-types 'none'",
    ].join('; '),
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
    'x-content-type-options': 'nosniff',
    'cross-origin-opener-policy': 'same-origin',
    'cache-control': 'no-store',
    pragma: 'no-cache',
  };
}

const TITLE = 'Console · Agent Credit Gateway';

export function consoleShell(bundle: ConsoleBundle, settings: ConsoleSettings): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${TITLE}</title>
<meta name="acg-console" content="${escapeHtml(JSON.stringify(settings))}">
<link rel="stylesheet" href="${escapeHtml(bundle.style.path)}" integrity="${escapeHtml(bundle.style.integrity)}">
<script type="module" src="${escapeHtml(bundle.script.path)}" integrity="${escapeHtml(bundle.script.integrity)}"></script>
</head><body><div id="app"><noscript>The console needs JavaScript.</noscript></div></body></html>`;
}

const PAGE_STYLE = `body{font-family:system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1f2328;line-height:1.5}
main{max-width:40rem;margin:3rem auto;background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:1.5rem 2rem}
h1{font-size:1.4rem;margin-top:0}h2{font-size:1.1rem}a{color:#0550ae}li{margin:.3rem 0}
pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:.6rem;overflow-x:auto}.muted{color:#59636e}`;

function page(nonce: string, title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title><style nonce="${nonce}">${PAGE_STYLE}</style></head><body><main>${body}</main></body></html>`;
}

/** Answered (503) by /console while dist/console/static does not exist. */
export function notBuiltPage(nonce: string): string {
  return page(
    nonce,
    TITLE,
    `<h1>The console is not built</h1><p>Run <code>npm run build</code> (which <code>npm install</code> runs too), then reload this page.</p><p><a href="/">Back</a></p>`,
  );
}

/** `/`: in dev mode the console, the API reference, the error catalogue and how to connect an MCP client; in live mode the first two. */
export function landingPage(nonce: string, view: { baseUrl: string; mode: 'dev' | 'live' }): string {
  const links = [
    `<li><a href="/console">Owner console</a>: your agents, their budgets and spending, approvals, merchants</li>`,
    `<li><a href="/docs">API reference</a> (<a href="/openapi.json">OpenAPI 3.1</a>)</li>`,
  ];
  if (view.mode === 'live') return page(nonce, 'Agent Credit Gateway', `<h1>Agent Credit Gateway</h1><ul>${links.join('')}</ul>`);
  const mcpUrl = `${view.baseUrl}/mcp`;
  links.push(`<li><a href="/docs/errors">Error catalogue</a></li>`, `<li><a href="#mcp">MCP setup</a></li>`);
  return page(
    nonce,
    'Agent Credit Gateway (dev)',
    `<h1>Agent Credit Gateway</h1><p class="muted">Dev mode: built-in identity issuers, a local DNS zone, test-mode payments.</p>
<ul>${links.join('')}</ul>
<h2 id="mcp">MCP setup</h2>
<p>The MCP endpoint is <code>${escapeHtml(mcpUrl)}</code> (streamable HTTP). A client with MCP OAuth support needs only that URL; it opens the consent page in your browser. With Claude Code:</p>
<pre tabindex="0" role="region" aria-label="Claude Code command"><code>claude mcp add --transport http agent-credit-gateway ${escapeHtml(mcpUrl)}</code></pre>
<p>VS Code (<code>.vscode/mcp.json</code>):</p>
<pre tabindex="0" role="region" aria-label="VS Code settings"><code>${escapeHtml(JSON.stringify({ servers: { 'agent-credit-gateway': { type: 'http', url: mcpUrl } } }, null, 2))}</code></pre>
<p>Without OAuth, send a dev owner session as the header: <code>Authorization: Bearer $(npx acg dev token human --email you@example.com)</code>.</p>`,
  );
}
