// The local approval page: GET /payments/topups/{id} (a top-up) and GET /payments/purchases/{id} (a purchase
// above the agent's mandate approval threshold). The owner signs in, sees the agent and the amount, and for a
// top-up the reason (labelled with whose words it is: the agent's, the owner's or the gateway's) and the retained
// intent with its price, for a purchase the merchant and the offer (and for an x402
// authorize the resource its attestation will be bound to: one offer may price many routes); then approves or
// declines. The page itself holds no data of the approval (any id renders the same shell, so it reveals
// nothing; it carries only the public catalogue's service titles); after sign-in its script reads the record,
// its agent and its intent through the API with the owner's bearer token and writes every value with
// textContent: names first, ids beside them. A settled top-up or an approved purchase is said in a success
// colour, a refusal or a failure in the error colour, anything else plainly. Approve and decline are API calls
// carrying that token in the Authorization header, which a cross-site page cannot send (no ambient
// credential: no cookie authenticates anything here), and the API refuses a foreign Origin on top.
// Headers are the consent page's: a per-response CSP nonce, no framing, no referrer, no caching.
import { escapeHtml } from '../platform/http/pages.ts';

/** What the page approves: a top-up, or a purchase above the agent's approval threshold. */
export type ApprovalPageKind = 'topup' | 'purchase';

export interface ApprovalPageView {
  kind: ApprovalPageKind;
  /** The top-up's or the purchase approval's id, from the path. */
  id: string;
  /** Dev mode's built-in human issuer: the page signs in through its dev login route. */
  devLoginUrl?: string;
  humanIssuer?: string;
  /** Each catalogue service's title by its id (public, the same on every page), to name a retained intent's service. */
  serviceTitles: Readonly<Record<string, string>>;
}

const STYLE = `body{font-family:system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1f2328;overflow-wrap:anywhere}
main{max-width:36rem;margin:3rem auto;background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:1.5rem 2rem}
h1{font-size:1.3rem}dt{font-weight:600;margin-top:.6rem}dd{margin:0;word-break:break-word}code{word-break:break-all}
form{border:1px solid #d0d7de;border-radius:6px;padding:1rem;margin:1rem 0}label{display:block;margin:.5rem 0}
input,textarea{width:100%;box-sizing:border-box;padding:.4rem;font:inherit}
button,a.button{display:inline-block;margin:.6rem .6rem 0 0;padding:.5rem 1rem;font:inherit;cursor:pointer}
#reason{white-space:pre-line;font-style:italic;border-left:3px solid #d0d7de;padding-left:.6rem}#status{min-height:1.5rem}.warning{color:#9a6700;font-weight:600}#status.ok{color:#1a7f37}#status.error{color:#9a1f1f}.muted{color:#59636e;font-size:.9rem}
[hidden]{display:none!important}`;


// Signs in, reads the top-up or the purchase (and the top-up's intent), then approves or declines through the API.
const SCRIPT = `(() => {
  const root = document.getElementById('approval');
  let status = document.getElementById('status');
  const services = JSON.parse(root.dataset.services);
  const kind = root.dataset.kind;
  const noun = kind === 'topup' ? 'top-up' : 'purchase';
  const path = (kind === 'topup' ? '/v1/payments/topups/' : '/v1/payments/purchases/') + encodeURIComponent(root.dataset.id);
  const byId = (id) => document.getElementById(id);
  const show = (id, on) => { byId(id).hidden = !on; };
  const text = (id, value) => { byId(id).textContent = value; };
  // tone: 'ok' (success colour), 'error' (error colour) or '' (plain). A refusal is an alert, the rest a status (found
  // from outside: "Not done: …" was said only politely); a live region's role is read when it appears, so the element
  // is replaced by one of the other role rather than changed.
  const say = (value, tone) => {
    const role = tone === 'error' ? 'alert' : 'status';
    if (status.getAttribute('role') !== role) {
      const next = status.cloneNode(false);
      next.setAttribute('role', role);
      status.replaceWith(next);
      status = next;
    }
    status.textContent = value;
    status.className = tone;
  };
  const TONE = { settled: 'ok', approved: 'ok', used: 'ok', failed: 'error' };
  const json = async (response) => { try { return await response.json(); } catch { return {}; } };
  // An exact decimal of an integer amount, its whole part grouped by thousands: µc → credits (6 places) or dollars
  // (8 places); at least 2 decimals shown.
  const decimal = (amount, places) => {
    const digits = BigInt(amount).toString().padStart(places + 1, '0');
    const fraction = digits.slice(-places).replace(/0+$/, '').padEnd(2, '0');
    return BigInt(digits.slice(0, -places)).toLocaleString('en-US') + '.' + fraction;
  };
  // In the console's form ("1,500.00 credits"), with the exact dollars beside it.
  const amount = (uc) => decimal(uc, 6) + ' credits ($' + decimal(uc, 8) + ')';
  // The API's status in words; the others are words already.
  const STATUS = { pending_approval: 'waiting for your answer' };
  // Back from Stripe Checkout: its success_url and cancel_url name this page with ?checkout=success or =cancel.
  const returned = new URLSearchParams(location.search).get('checkout');
  // Looks again for Stripe's confirmation after a payment (the webhook usually follows in seconds): 40 looks, 3 s apart.
  let looksLeft = 40;
  let token = '';
  // The status the page shows, which a click answers: a purchase answered meanwhile is said, not changed again.
  let shownStatus = '';
  let shownName = '';
  const api = (method, path, body) => fetch(path, {
    method,
    headers: body === undefined
      ? { authorization: 'Bearer ' + token }
      : { authorization: 'Bearer ' + token, 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  // Whose words the reason is: execute's automatic top-up is the gateway's (found from outside: it read as the agent's).
  const REASON_BY = {
    agent: "Reason, in the agent's own words",
    owner: "Reason, in the owner's words (the owner asked for this top-up)",
    gateway: "Reason, in the gateway's words (the gateway asked for this top-up when the agent's credit fell short)",
  };
  const showTopup = async (topup) => {
    text('amount', amount(topup.amountUc));
    text('reason-label', REASON_BY[topup.requestedBy] || 'Reason');
    text('reason', topup.reason);
    text('mode', topup.livemode ? 'live' : 'test mode: no money moves');
    if (topup.intentId) {
      const found = await api('GET', '/v1/intents/' + encodeURIComponent(topup.intentId));
      const intent = await json(found);
      const service = found.ok ? intent.intent.serviceId : '';
      const title = Object.hasOwn(services, service) ? services[service] + ': ' : '';
      // Its price beside the amount asked (found from outside: a 1-credit action asked for $5.00 with no word why).
      text('intent', found.ok ? title + service + ' ' + intent.intent.action + ' ' + JSON.stringify(intent.intent.input) + ' (' + intent.state + '), price ' + amount(intent.priceUc) : topup.intentId);
    } else {
      text('intent', 'none');
    }
    const pending = topup.status === 'pending_approval';
    // Paid at Checkout, not confirmed yet: nothing to answer (found from outside: the page still asked, and offered Pay
    // and a Decline the gateway then refused).
    const paid = pending && topup.provider === 'stripe' && returned === 'success';
    show('approve', pending && topup.provider === 'local');
    show('checkout', pending && topup.provider === 'stripe' && !paid);
    show('decline', pending && !paid);
    if (topup.provider === 'stripe') byId('checkout').href = topup.checkoutUrl;
    if (paid) text('state', 'paid at Stripe Checkout: waiting for Stripe to confirm the payment');
    return { pending, paid };
  };
  const showPurchase = (purchase) => {
    text('amount', amount(purchase.amountUc));
    text('merchant-name', purchase.merchant ? purchase.merchant.name : 'a built-in service of this gateway');
    text('merchant', purchase.merchant ? purchase.merchant.domain : '');
    text('offer-name', purchase.offer.name);
    text('offer', purchase.offer.id);
    show('resource-row', typeof purchase.resource === 'string');
    text('resource', purchase.resource || '');
    const pending = purchase.status === 'pending_approval';
    show('approve', pending);
    // The API's decline also withdraws an approval not used yet: the button says which it does (found from outside:
    // it read "Decline" on an approved purchase, as the console's card does not).
    show('decline', pending || purchase.status === 'approved');
    text('decline', purchase.status === 'approved' ? 'Withdraw the approval' : 'Decline');
    return { pending, paid: false };
  };
  const load = async () => {
    const response = await api('GET', path);
    const record = await json(response);
    if (!response.ok) { say('This ' + noun + ' cannot be shown: ' + (record.detail || record.title || response.status), 'error'); return; }
    const agentFound = await api('GET', '/v1/owner/agents/' + encodeURIComponent(record.agentId));
    const agent = await json(agentFound);
    text('agent-name', agentFound.ok ? agent.name : '');
    text('agent', record.agentId);
    // A delegate names itself as it likes, another agent's name too: say whose it is (found from outside).
    const parentFound = agentFound.ok && agent.parentId ? await api('GET', '/v1/owner/agents/' + encodeURIComponent(agent.parentId)) : undefined;
    const parent = parentFound && parentFound.ok ? await json(parentFound) : undefined;
    show('agent-parent', parent !== undefined);
    text('agent-parent-name', parent ? parent.name : '');
    text('agent-parent-id', parent ? parent.id : '');
    text('state', STATUS[record.status] || record.status);
    // A deadline only while one runs: the answer's, or an approved purchase's retry's; none once the request is closed.
    const approved = kind === 'purchase' && record.status === 'approved';
    // With its zone, as the console says its times (found from outside: "Expires 12/7/2026, 2:06:00 AM").
    const expires = new Date(record.expiresAt * 1000).toLocaleString(undefined, { timeZoneName: 'short' });
    show('expires-row', record.status === 'pending_approval' || approved);
    text('expires-label', approved ? 'The agent retries before' : 'Expires');
    text('expires', expires);
    shownStatus = record.status;
    for (const row of document.querySelectorAll('[data-for]')) row.hidden = row.dataset.for !== kind;
    const { pending, paid } = kind === 'topup' ? await showTopup(record) : showPurchase(record);
    // Said before the owner decides, as the console's card says it (found from outside: the page offered a plain Approve).
    const stopped = agentFound.ok ? (agent.effectiveStatus || agent.status) : 'active';
    const name = agentFound.ok ? agent.name : record.agentId;
    shownName = name;
    const frozen = stopped === 'frozen' ? ' until it is unfrozen' : '';
    text('stopped', kind === 'topup'
      ? name + ' is ' + stopped + ': a top-up approved now credits a balance it cannot spend' + frozen + '.'
      : stopped === 'frozen'
        ? name + ' is frozen: this purchase cannot be approved until it is unfrozen (its retry would be refused). You can decline it.'
        : name + ' is retired: it can never spend again, so this purchase cannot be approved. Decline it.');
    const isStopped = stopped === 'frozen' || stopped === 'retired';
    show('stopped', pending && isStopped);
    // The gateway refuses to approve a stopped agent's purchase: no button that can only be refused.
    if (kind === 'purchase' && isStopped) show('approve', false);
    show('signin', false);
    show('details', true);
    say(pending ? '' : 'This ' + noun + ' is ' + record.status + '.' + (approved ? ' ' + name + "'s retry of the purchase, before " + expires + ', takes the hold; withdraw the approval to refuse it.' : ''), TONE[record.status] || '');
    if (paid && looksLeft > 0) {
      looksLeft -= 1;
      say('You paid at Stripe Checkout. The credit is added once Stripe confirms the payment; this page looks again every few seconds.', '');
      setTimeout(() => { void load(); }, 3000);
    } else if (paid) {
      say('Stripe has not confirmed the payment yet. Nothing more is needed from you: the credit is added when it does; reload this page later.', '');
    } else if (pending && kind === 'topup' && returned === 'cancel') {
      say('You left Stripe Checkout without paying: pay now, or decline.', '');
    }
  };
  const act = async (verb) => {
    for (const b of document.querySelectorAll('button')) b.disabled = true;
    if (kind === 'purchase' && verb === 'decline') {
      // Answered meanwhile (another tab, the console, the agent's retry): said, not declined or withdrawn unseen
      // (found from outside: a stale tab's Decline withdrew an approval just given elsewhere).
      const now = await api('GET', path);
      const current = await json(now);
      if (now.ok && current.status !== shownStatus) {
        const was = shownStatus === 'approved' ? 'withdrawn' : 'declined';
        await load();
        for (const b of document.querySelectorAll('button')) b.disabled = false;
        say('Not ' + was + ': the purchase for ' + shownName + ' was ' + current.status + " meanwhile (in another tab, in the console, or by the agent's retry). It is shown as it is now.", 'error');
        focusOutcome();
        return;
      }
    }
    const response = await api('POST', path + '/' + verb, {});
    const body = await json(response);
    for (const b of document.querySelectorAll('button')) b.disabled = false;
    // The session lapsed (a dev session lives 5 minutes): the person signs in again here, then decides again.
    if (response.status === 401) {
      token = '';
      show('signin', true);
      say('Your sign-in has lapsed: sign in again, then ' + verb + ' the ' + noun + '.', 'error');
      focusOutcome();
      return;
    }
    if (!response.ok) {
      // Refused: what became of the request is read again (declined or expired meanwhile), then the refusal is said.
      const reason = 'Not done: ' + (body.detail || body.title || response.status);
      await load();
      say(reason, 'error');
      focusOutcome();
      return;
    }
    await load();
    focusOutcome();
  };
  // The button that had focus is disabled while the answer is sent and hidden once it shows: focus goes to what was
  // said, a refusal too (found from outside: to <body>).
  const focusOutcome = () => (status.textContent ? status : byId('details')).focus();
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
      focusOutcome();
    } catch (error) {
      say('Sign-in failed: ' + error.message, 'error');
    }
  });
})();`;

/** What each kind of page says of itself. */
const WORDING: Record<ApprovalPageKind, { title: string; heading: string }> = {
  topup: { title: 'Approve a top-up', heading: 'An agent asks for credit' },
  purchase: { title: 'Approve a purchase', heading: 'An agent asks to buy' },
};

export function approvalPage(nonce: string, view: ApprovalPageView): string {
  const signIn = view.devLoginUrl
    ? `<p class="muted">Dev mode: the built-in issuer signs you in without a password.</p><label>Owner email <input name="email" type="email" required autocomplete="email"></label>`
    : `<label>Session token from <code>${escapeHtml(view.humanIssuer ?? 'your identity provider')}</code> <textarea name="token" rows="3" required autocomplete="off"></textarea></label>`;
  const login = view.devLoginUrl ? ` data-login="${escapeHtml(view.devLoginUrl)}"` : '';
  const wording = WORDING[view.kind];
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${wording.title} · Agent Credit Gateway</title><style nonce="${nonce}">${STYLE}</style></head>
<body><main><div id="approval" data-kind="${view.kind}" data-id="${escapeHtml(view.id)}" data-services="${escapeHtml(JSON.stringify(view.serviceTitles))}"${login}>
<h1>${wording.heading}</h1>
<form id="signin"><p>Sign in as the agent's owner to see the request.</p>${signIn}<button type="submit">Sign in</button></form>
<div id="details" hidden tabindex="-1"><dl>
<dt>Agent</dt><dd><bdi id="agent-name"></bdi> <code id="agent" class="muted"></code><span id="agent-parent" hidden>, a delegate of <bdi id="agent-parent-name"></bdi> <code id="agent-parent-id" class="muted"></code>, which named it; it spends its root's credit</span></dd>
<div data-for="purchase" hidden><dt>Merchant</dt><dd><bdi id="merchant-name"></bdi> <code id="merchant" class="muted"></code></dd>
<dt>Offer</dt><dd><span id="offer-name"></span> <code id="offer" class="muted"></code></dd></div>
<div id="resource-row" data-for="purchase" hidden><dt>Resource</dt><dd><code id="resource"></code></dd></div>
<dt>Amount</dt><dd id="amount"></dd>
<div data-for="topup" hidden><dt id="reason-label">Reason</dt><dd><q id="reason"></q></dd><dt>Retained intent</dt><dd id="intent"></dd></div>
<dt>Status</dt><dd id="state"></dd>
<div data-for="topup" hidden><dt>Payment</dt><dd id="mode"></dd></div>
<div id="expires-row"><dt id="expires-label">Expires</dt><dd id="expires"></dd></div></dl>
<p id="stopped" class="warning" hidden></p>
<button id="approve" type="button" hidden>Approve</button><a id="checkout" class="button" hidden>Pay with Stripe Checkout</a>
<button id="decline" type="button" hidden>Decline</button></div>
<p id="status" role="status" tabindex="-1"></p></div></main><script nonce="${nonce}">${SCRIPT}</script></body></html>`;
}

/**
 * What a person who opened an approval link whose id cannot name an approval sees (a 400 in HTML, where the API
 * answers a problem body): the page, not JSON.
 */
export function invalidLinkPage(nonce: string, kind: ApprovalPageKind): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${WORDING[kind].title} · Agent Credit Gateway</title><style nonce="${nonce}">${STYLE}</style></head>
<body><main><h1>This link does not name a ${kind === 'topup' ? 'top-up' : 'purchase'}</h1>
<p>The address is not one the gateway gives: check that it was copied whole, or open the request from your console's Approvals.</p></main></body></html>`;
}
