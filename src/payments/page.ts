// The local approval page (GET /payments/topups/{id}): the owner signs in, sees the agent, the amount,
// the reason and the retained intent, and approves or declines. The page itself holds no data of the
// top-up (any id renders the same shell, so it reveals nothing; it carries only the public catalogue's
// service titles); after sign-in its script reads the top-up, its agent and its intent through the API with
// the owner's bearer token and writes every value with textContent: names first, ids beside them. A
// settled top-up is said in a success colour, a refusal or a failure in the error colour, anything else
// plainly. Approve and decline are API calls
// carrying that token in the Authorization header, which a cross-site page cannot send (no ambient
// credential: no cookie authenticates anything here), and the API refuses a foreign Origin on top.
// Headers are the consent page's: a per-response CSP nonce, no framing, no referrer, no caching.
import { escapeHtml } from '../platform/http/pages.ts';

export interface ApprovalPageView {
  topupId: string;
  /** Dev mode's built-in human issuer: the page signs in through its dev login route. */
  devLoginUrl?: string;
  humanIssuer?: string;
  /** Each catalogue service's title by its id (public, the same on every page), to name a retained intent's service. */
  serviceTitles: Readonly<Record<string, string>>;
}

const STYLE = `body{font-family:system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1f2328}
main{max-width:36rem;margin:3rem auto;background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:1.5rem 2rem}
h1{font-size:1.3rem}dt{font-weight:600;margin-top:.6rem}dd{margin:0;word-break:break-word}code{word-break:break-all}
form{border:1px solid #d0d7de;border-radius:6px;padding:1rem;margin:1rem 0}label{display:block;margin:.5rem 0}
input,textarea{width:100%;box-sizing:border-box;padding:.4rem;font:inherit}
button,a.button{display:inline-block;margin:.6rem .6rem 0 0;padding:.5rem 1rem;font:inherit;cursor:pointer}
#status{min-height:1.5rem}#status.ok{color:#1a7f37}#status.error{color:#9a1f1f}.muted{color:#59636e;font-size:.9rem}
[hidden]{display:none!important}`;


// Signs in, reads the top-up (and its intent), then approves or declines through the API.
const SCRIPT = `(() => {
  const root = document.getElementById('topup');
  const status = document.getElementById('status');
  const services = JSON.parse(root.dataset.services);
  const byId = (id) => document.getElementById(id);
  const show = (id, on) => { byId(id).hidden = !on; };
  const text = (id, value) => { byId(id).textContent = value; };
  // tone: 'ok' (success colour), 'error' (error colour) or '' (plain).
  const say = (value, tone) => { status.textContent = value; status.className = tone; };
  const TONE = { settled: 'ok', failed: 'error' };
  const json = async (response) => { try { return await response.json(); } catch { return {}; } };
  let token = '';
  const api = (method, path, body) => fetch(path, {
    method,
    headers: body === undefined
      ? { authorization: 'Bearer ' + token }
      : { authorization: 'Bearer ' + token, 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const load = async () => {
    const response = await api('GET', '/v1/payments/topups/' + encodeURIComponent(root.dataset.topupId));
    const topup = await json(response);
    if (!response.ok) { say('This top-up cannot be shown: ' + (topup.detail || topup.title || response.status), 'error'); return; }
    const agentFound = await api('GET', '/v1/owner/agents/' + encodeURIComponent(topup.agentId));
    const agent = await json(agentFound);
    text('agent-name', agentFound.ok ? agent.name : '');
    text('agent', topup.agentId);
    text('amount', '$' + (topup.amountUsdCents / 100).toFixed(2) + ' (' + topup.amountUsdCents + ' credits)');
    text('reason', topup.reason);
    text('state', topup.status);
    text('mode', topup.livemode ? 'live' : 'test mode: no money moves');
    if (topup.intentId) {
      const found = await api('GET', '/v1/intents/' + encodeURIComponent(topup.intentId));
      const intent = await json(found);
      const service = found.ok ? intent.intent.serviceId : '';
      const title = Object.hasOwn(services, service) ? services[service] + ': ' : '';
      text('intent', found.ok ? title + service + ' ' + intent.intent.action + ' ' + JSON.stringify(intent.intent.input) + ' (' + intent.state + ')' : topup.intentId);
    } else {
      text('intent', 'none');
    }
    const pending = topup.status === 'pending_approval';
    show('signin', false);
    show('details', true);
    show('approve', pending && topup.provider === 'local');
    show('checkout', pending && topup.provider === 'stripe');
    show('decline', pending);
    if (topup.provider === 'stripe') byId('checkout').href = topup.checkoutUrl;
    say(pending ? '' : 'This top-up is ' + topup.status + '.', TONE[topup.status] || '');
  };
  const act = async (verb) => {
    for (const b of document.querySelectorAll('button')) b.disabled = true;
    const response = await api('POST', '/v1/payments/topups/' + encodeURIComponent(root.dataset.topupId) + '/' + verb, {});
    const body = await json(response);
    for (const b of document.querySelectorAll('button')) b.disabled = false;
    if (!response.ok) { say('Not done: ' + (body.detail || body.title || response.status), 'error'); return; }
    await load();
  };
  byId('approve').addEventListener('click', () => act('approve'));
  byId('decline').addEventListener('click', () => act('decline'));
  byId('signin').addEventListener('submit', async (event) => {
    event.preventDefault();
    const fields = Object.fromEntries(new FormData(byId('signin')));
    try {
      if (root.dataset.login) {
        const login = await fetch(root.dataset.login, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: fields.email }) });
        const body = await json(login);
        if (!login.ok) { say('Sign-in failed: ' + (body.detail || body.title || login.status), 'error'); return; }
        token = body.token;
      } else {
        token = String(fields.token || '').trim();
      }
      say('', '');
      await load();
    } catch (error) {
      say('Sign-in failed: ' + error.message, 'error');
    }
  });
})();`;

export function approvalPage(nonce: string, view: ApprovalPageView): string {
  const signIn = view.devLoginUrl
    ? `<p class="muted">Dev mode: the built-in issuer signs you in without a password.</p><label>Owner email <input name="email" type="email" required autocomplete="email"></label>`
    : `<label>Session token from <code>${escapeHtml(view.humanIssuer ?? 'your identity provider')}</code> <textarea name="token" rows="3" required autocomplete="off"></textarea></label>`;
  const login = view.devLoginUrl ? ` data-login="${escapeHtml(view.devLoginUrl)}"` : '';
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Approve a top-up · Agent Credit Gateway</title><style nonce="${nonce}">${STYLE}</style></head>
<body><main><div id="topup" data-topup-id="${escapeHtml(view.topupId)}" data-services="${escapeHtml(JSON.stringify(view.serviceTitles))}"${login}>
<h1>An agent asks for credit</h1>
<form id="signin"><p>Sign in as the agent's owner to see the request.</p>${signIn}<button type="submit">Sign in</button></form>
<div id="details" hidden><dl>
<dt>Agent</dt><dd><span id="agent-name"></span> <code id="agent" class="muted"></code></dd><dt>Amount</dt><dd id="amount"></dd><dt>Reason</dt><dd id="reason"></dd>
<dt>Retained intent</dt><dd id="intent"></dd><dt>Status</dt><dd id="state"></dd><dt>Payment</dt><dd id="mode"></dd></dl>
<button id="approve" type="button" hidden>Approve</button><a id="checkout" class="button" hidden>Pay with Stripe Checkout</a>
<button id="decline" type="button" hidden>Decline</button></div>
<p id="status" role="status"></p></div></main><script nonce="${nonce}">${SCRIPT}</script></body></html>`;
}
