// The HTML the gateway shows during authorization: the consent page (choose an identity provider,
// sign in, allow) and the error page for requests that cannot be sent back to the client. Every value
// is HTML-escaped; client_name is attacker-controlled (RFC 7591 §5). The only script is inline and
// runs under a per-response CSP nonce.
import { escapeHtml } from '../platform/http/pages.ts';
import { REMEMBERED_CONSENT_LIFETIME_S } from './limits.ts';
import type { ConsentView, ProviderOption } from './consent.ts';
import { CONSOLE_CLIENT_ID } from './console-client.ts';
import type { IdentityProviderChoice } from './scopes.ts';

const STYLE = `body{font-family:system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1f2328;overflow-wrap:anywhere}
main{max-width:34rem;margin:3rem auto;background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:1.5rem 2rem}
h1{font-size:1.3rem}h2{font-size:1.05rem;margin:0 0 .3rem}code{word-break:break-all}
form{border:1px solid #d0d7de;border-radius:6px;padding:1rem;margin:1rem 0}
label{display:block;margin:.5rem 0}input,textarea{width:100%;box-sizing:border-box;padding:.4rem;font:inherit}
button{margin-top:.6rem;padding:.5rem 1rem;font:inherit;cursor:pointer}
#status{min-height:1.5rem;color:#9a1f1f}.muted{color:#59636e;font-size:.9rem}`;

function page(nonce: string, title: string, body: string, script = ''): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)} · Agent Credit Gateway</title><style nonce="${nonce}">${STYLE}</style></head>
<body><main>${body}</main>${script ? `<script nonce="${nonce}">${script}</script>` : ''}</body></html>`;
}

export function errorPage(nonce: string, error: string, description: string): string {
  return page(
    nonce,
    'Authorization failed',
    `<h1>This authorization request cannot continue</h1>
<p id="error" data-error="${escapeHtml(error)}"><code>${escapeHtml(error)}</code>: ${escapeHtml(description)}</p>
<p class="muted">The application that sent you here could not be verified, so you are not sent back to it. Close this page and start again from the application.</p>`,
  );
}

const PROVIDER_TEXT: Record<IdentityProviderChoice, { title: string; grants: string; button: string }> = {
  human: { title: 'Human owner', grants: 'owner controls over your agents and merchants (scope svc:owner)', button: 'Sign in as owner and allow' },
  agent: { title: 'Agent', grants: 'acting as one of your registered agents (scope svc:agent)', button: 'Sign in as agent and allow' },
};

function providerForm(option: ProviderOption): string {
  const text = PROVIDER_TEXT[option.choice];
  let fields: string;
  if (option.devLoginUrl && option.choice === 'human') {
    fields = `<label>Email <input name="email" type="email" required autocomplete="email"></label>`;
  } else if (option.devLoginUrl) {
    fields = `<label>Agent subject <input name="subject" required autocomplete="off"></label>
<label>Owner email <input name="ownerEmail" type="email" required autocomplete="email"></label>`;
  } else {
    fields = `<label>Session token from <code>${escapeHtml(option.issuer)}</code> <textarea name="token" rows="3" required autocomplete="off"></textarea></label>`;
  }
  const dev = option.devLoginUrl ? ` data-login="${escapeHtml(option.devLoginUrl)}"` : '';
  const note = option.devLoginUrl ? '<p class="muted">Dev mode: the built-in issuer signs you in without a password.</p>' : '';
  return `<form data-provider="${option.choice}"${dev}><h2>${text.title}</h2><p class="muted">Grants ${escapeHtml(text.grants)}.</p>${note}
${fields}<button type="submit">${text.button}</button></form>`;
}

// Signs in (dev login route or a pasted provider token), then asks select for the callback URL.
const CONSENT_SCRIPT = `(() => {
  const main = document.getElementById('consent');
  const status = document.getElementById('status');
  const fail = (text) => { status.textContent = text; for (const b of document.querySelectorAll('button')) b.disabled = false; };
  const json = async (response) => { try { return await response.json(); } catch { return {}; } };
  for (const form of document.querySelectorAll('form[data-provider]')) {
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      for (const b of document.querySelectorAll('button')) b.disabled = true;
      status.textContent = 'Signing in…';
      const fields = Object.fromEntries(new FormData(form));
      try {
        let token = typeof fields.token === 'string' ? fields.token.trim() : '';
        if (form.dataset.login) {
          const login = await fetch(form.dataset.login, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(fields) });
          const body = await json(login);
          if (!login.ok) return fail('Sign-in failed: ' + (body.detail || body.title || login.status));
          token = body.token;
        }
        const response = await fetch(main.dataset.select, {
          method: 'POST',
          credentials: 'same-origin',
          headers: { 'content-type': 'application/json', authorization: 'Bearer ' + token, 'x-consent-token': main.dataset.consentToken },
          body: JSON.stringify({ requestId: main.dataset.requestId, identityProvider: form.dataset.provider }),
        });
        const body = await json(response);
        if (!response.ok || typeof body.redirectUrl !== 'string') return fail('Not allowed: ' + (body.error_description || body.error || response.status));
        status.textContent = 'Allowed. Returning to the application…';
        window.location.assign(body.redirectUrl);
      } catch (error) {
        fail('Sign-in failed: ' + error.message);
      }
    });
  }
  document.getElementById('decline').addEventListener('click', async () => {
    for (const b of document.querySelectorAll('button')) b.disabled = true;
    status.textContent = 'Declining…';
    try {
      const response = await fetch(main.dataset.deny, {
        method: 'POST',
        credentials: 'same-origin',
        headers: { 'content-type': 'application/json', 'x-consent-token': main.dataset.consentToken },
        body: JSON.stringify({ requestId: main.dataset.requestId }),
      });
      const body = await json(response);
      if (!response.ok || typeof body.redirectUrl !== 'string') return fail('Could not decline: ' + (body.error_description || body.error || response.status));
      status.textContent = 'Declined. Returning to the application…';
      window.location.assign(body.redirectUrl);
    } catch (error) {
      fail('Could not decline: ' + error.message);
    }
  });
})();`;

export function consentPage(nonce: string, view: ConsentView): string {
  const name = view.clientName ? escapeHtml(view.clientName) : 'An unnamed application';
  const returnTo = new URL(view.redirectUri);
  // A registered client's name is its developer's word (RFC 7591 §5): the page says so, and where it returns you to.
  const firstParty = view.clientId === CONSOLE_CLIENT_ID;
  return page(
    nonce,
    'Authorize application',
    `<div id="consent" data-request-id="${escapeHtml(view.requestId)}" data-consent-token="${escapeHtml(view.consentToken)}" data-select="${escapeHtml(view.selectUrl)}" data-deny="${escapeHtml(view.denyUrl)}">
<h1><strong>${name}</strong>${firstParty ? '' : ` at <strong>${escapeHtml(returnTo.host)}</strong>`} wants access to the Agent Credit Gateway</h1>
${firstParty ? '' : `<p><strong>An application registered by its own developer</strong>, not part of this gateway: the gateway does not vouch for its name.</p>
`}<p>It will receive a 10-minute access token for <code>${escapeHtml(view.resource)}</code> and return you to
<code>${escapeHtml(`${returnTo.protocol}//${returnTo.host}`)}</code>.</p>
<p class="muted">Client id <code>${escapeHtml(view.clientId)}</code>. Only continue if you started this from that application.</p>
${view.remembered
    ? `<p class="muted" id="remembered">Your consent is remembered in this browser for ${REMEMBERED_CONSENT_LIFETIME_S / 3600} hours: this application
may sign in again for the same access without this page. Revoke it at any time with
<code>DELETE /v1/owner/oauth-grants/${escapeHtml(view.clientId)}</code>.</p>`
    : `<p class="muted" id="remembered">Your consent is not remembered: this gateway is served over plain http, where other services
of this host could read what a browser keeps for it, so this page asks again each time.</p>`}
<p>Choose who you sign in as:</p>
${view.providers.map(providerForm).join('\n')}
<p>Or decline: ${escapeHtml(returnTo.host)} is told you said no.</p>
<button id="decline" type="button">Decline and return to the application</button>
<p id="status" role="status"></p></div>`,
    CONSENT_SCRIPT,
  );
}
