// The owner console: signs the owner in (auth.ts), then shows the page the path names. Every page reads and
// acts through the public API (api.ts); nothing here holds a credential beyond the tab's memory.
import './console.css';
import { render } from 'preact';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ok, ownerApi, type Api } from './api.ts';
import { Auth, SignInRequired } from './auth.ts';
import { AgentPage } from './pages/agent.tsx';
import { AgentsPage } from './pages/agents.tsx';
import { ApprovalsPage } from './pages/approvals.tsx';
import { MerchantPage, MerchantsPage } from './pages/merchants.tsx';
import { OwnerWebhookPage } from './pages/webhook.tsx';
import { SpendingPage } from './pages/spending.tsx';
import { followLink, forgetKept, keepUnsaved, keptAny, mayLeave, usePath } from './router.ts';
import { readSettings, type Settings } from './settings.ts';
import { actionRunning, ConsoleContext, describe, Dialog, PageTitle, type Console } from './ui.tsx';

type State = { kind: 'starting' } | { kind: 'signed-out'; reason?: string } | { kind: 'ready'; owner: { id: string; email: string } };

function SignIn({ auth, reason }: { auth: Auth; reason?: string }) {
  const [busy, setBusy] = useState(false);
  const go = (prompt?: 'select_account') => {
    setBusy(true);
    auth.signIn({ prompt }).catch(() => setBusy(false));
  };
  return (
    <main id="main" class="sign-in">
      <PageTitle title="Sign in">Agent Credit Gateway console</PageTitle>
      <p>See and govern what your agents spend: their budgets, balances, approvals and merchants.</p>
      {reason ? (
        <p class="notice" role="status">
          {reason}
        </p>
      ) : null}
      {keptAny() ? (
        <p class="notice" role="status">
          Your unsaved changes are kept in this tab: sign in again to get them back.
        </p>
      ) : null}
      <p>
        <button type="button" class="primary" disabled={busy} onClick={() => go()}>
          Sign in
        </button>{' '}
        <button type="button" class="link" disabled={busy} onClick={() => go('select_account')}>
          Sign in as someone else
        </button>
      </p>
      <p class="muted">You sign in on the gateway's own page; the console keeps your session in this tab's memory only.</p>
    </main>
  );
}

const NAV = [
  ['/console', 'Agents'],
  ['/console/approvals', 'Approvals'],
  ['/console/spending', 'Spending'],
  ['/console/merchants', 'Merchants'],
  ['/console/webhook', 'Owner webhook'],
] as const;

function Page({ path }: { path: string }) {
  const agent = /^\/console\/agents\/([^/]+)$/.exec(path);
  if (agent) return <AgentPage id={decodeURIComponent(agent[1]!)} />;
  const merchant = /^\/console\/merchants\/([^/]+)$/.exec(path);
  if (merchant) return <MerchantPage id={decodeURIComponent(merchant[1]!)} />;
  switch (path) {
    case '/console':
    case '/console/agents':
      return <AgentsPage />;
    case '/console/approvals':
      return <ApprovalsPage />;
    case '/console/spending':
      return <SpendingPage />;
    case '/console/merchants':
      return <MerchantsPage />;
    case '/console/webhook':
      return <OwnerWebhookPage />;
    default:
      return (
        <>
          <PageTitle title="Not found">Not found</PageTitle>
          <p>
            No console page here. <a href="/console">Your agents</a>
          </p>
        </>
      );
  }
}

function section(path: string): string {
  if (path.startsWith('/console/agents')) return '/console';
  return NAV.find(([href]) => href !== '/console' && path.startsWith(href))?.[0] ?? (path === '/console' ? '/console' : '');
}

/** Asks the person for a human session at the identity provider (dev mode: the built-in issuer's login). */
function HumanConfirmation({ request, settings, email, onDone }: { request: { purpose: string } | undefined; settings: Settings; email: string; onDone: (session?: string, error?: string) => void }) {
  const [problem, setProblem] = useState('');
  const signIn = settings.humanSignIn;
  const submit = async (event: Event) => {
    event.preventDefault();
    const fields = new FormData(event.currentTarget as HTMLFormElement);
    setProblem('');
    try {
      if (signIn.kind === 'dev') {
        const response = await fetch(signIn.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: fields.get('email') }) });
        const body = (await response.json().catch(() => ({}))) as { token?: string; detail?: string };
        if (!response.ok || !body.token) throw new Error(body.detail ?? `the sign-in answered ${response.status}`);
        onDone(body.token);
      } else {
        const token = String(fields.get('token') ?? '').trim();
        if (!token) throw new Error('Paste a session token.');
        onDone(token);
      }
    } catch (error) {
      setProblem(describe(error));
    }
  };
  return (
    <Dialog title="Confirm it is you" open={request !== undefined} onClose={() => onDone(undefined, 'Not confirmed.')}>
      <form onSubmit={submit}>
        <p>{request?.purpose} needs your own sign-in at the identity provider, not only the console's session.</p>
        {signIn.kind === 'dev' ? (
          <>
            <p class="muted">Dev mode: the built-in issuer signs you in without a password.</p>
            <label>
              Owner email <input name="email" type="email" required autocomplete="email" defaultValue={email} />
            </label>
          </>
        ) : signIn.kind === 'token' ? (
          <label>
            Session token from <code>{signIn.issuer}</code>
            <textarea name="token" rows={3} required autocomplete="off" />
          </label>
        ) : (
          <p>No human identity provider is configured on this gateway.</p>
        )}
        {problem ? (
          <p class="error" role="alert">
            {problem}
          </p>
        ) : null}
        <p>
          <button type="submit" class="primary" disabled={signIn.kind === 'none'}>
            Confirm
          </button>{' '}
          <button type="button" onClick={() => onDone(undefined, 'Not confirmed.')}>
            Cancel
          </button>
        </p>
      </form>
    </Dialog>
  );
}

function Ready({ settings, auth, api, owner, onSignedOut }: { settings: Settings; auth: Auth; api: Api; owner: { id: string; email: string }; onSignedOut: (reason: string) => void }) {
  const path = usePath();
  const first = useRef(true);
  const [confirming, setConfirming] = useState<{ purpose: string; resolve: (session: string) => void; reject: (error: Error) => void } | undefined>();
  const human = useRef<{ session: string; expiresAtMs: number } | undefined>(undefined);
  // The frame's one polite live region (`announce`): what a page says without moving the focus. The count makes the
  // same words said twice a change a screen reader hears again (a second failed Refresh).
  const [announced, setAnnounced] = useState({ text: '', count: 0 });

  const context = useMemo<Console>(
    () => ({
      settings,
      auth,
      api,
      owner,
      humanSession: (purpose) => {
        const held = human.current;
        if (held && held.expiresAtMs > Date.now()) return Promise.resolve(held.session);
        return new Promise((resolve, reject) => setConfirming({ purpose, resolve, reject }));
      },
      forgetHumanSession: () => {
        human.current = undefined;
      },
      announce: (text) => setAnnounced((previous) => ({ text, count: previous.count + 1 })),
    }),
    [settings, auth, api, owner],
  );

  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    document.querySelector<HTMLElement>('main h1')?.focus();
    setAnnounced((previous) => ({ text: '', count: previous.count }));
  }, [path]);

  const [signOutProblem, setSignOutProblem] = useState('');
  // Forgetting the token alone left the consent remembered, and a reload signed the owner straight back in. The
  // console gives its token back (POST /oauth/revoke), which revokes the consent and its live tokens in every
  // browser: one click, as signing out is anywhere else.
  const signOut = async () => {
    if (!mayLeave()) return;
    setSignOutProblem('');
    try {
      const reach = await auth.signOut();
      context.forgetHumanSession();
      // Signing out is leaving: the person confirmed it (mayLeave), so no draft waits for the next sign-in.
      forgetKept();
      onSignedOut(
        reach === 'everywhere'
          ? "You are signed out, in every browser: the console's access is revoked, so signing in again asks you on the gateway's page."
          : 'You are signed out in this browser: its sign-in had already ended. Signing in again asks you on the gateway\'s page.',
      );
    } catch (error) {
      setSignOutProblem(`Not signed out: ${describe(error)}`);
    }
  };

  const current = section(path);
  return (
    <ConsoleContext.Provider value={context}>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href="/console" onClick={followLink}>
          Agent Credit Gateway
        </a>
        <nav aria-label="Console" onClick={followLink}>
          {NAV.map(([href, label]) => (
            <a href={href} aria-current={current === href ? 'page' : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <span class="who">
          <span class="muted">Signed in as</span> {owner.email}{' '}
          <button type="button" class="link" onClick={() => void signOut()}>
            Sign out
          </button>
          {signOutProblem ? (
            <span class="error" role="alert">
              {' '}
              {signOutProblem}
            </span>
          ) : null}
        </span>
      </header>
      <main id="main" onClick={followLink}>
        <Page path={path} />
      </main>
      <p class="visually-hidden" role="status" id="announced">
        {announced.text}
        {announced.count % 2 === 1 ? '\u00a0' : ''}
      </p>
      <HumanConfirmation
        request={confirming}
        settings={settings}
        email={owner.email}
        onDone={(session, error) => {
          const pending = confirming;
          setConfirming(undefined);
          if (!pending) return;
          if (session) {
            // Dev sessions live 300 s; keep it a little less, then the person confirms again.
            human.current = { session, expiresAtMs: Date.now() + 240_000 };
            pending.resolve(session);
          } else {
            pending.reject(new Error(error ?? 'Not confirmed.'));
          }
        }}
      />
    </ConsoleContext.Provider>
  );
}

function App({ settings, auth }: { settings: Settings; auth: Auth }) {
  const api = useMemo(() => ownerApi(auth), [auth]);
  const [state, setState] = useState<State>({ kind: 'starting' });
  /** The owner signed in, for the drafts kept when that sign-in ends (`keepUnsaved`). */
  const signedInOwner = useRef<{ id: string } | undefined>(undefined);

  useEffect(() => {
    const start = async () => {
      try {
        if (auth.isCallback()) await auth.completeSignIn();
        else await auth.renew();
        const me = ok(await api.GET('/v1/me'));
        if (!me.owner) throw new SignInRequired('This session is not an owner session.');
        // Drafts another owner left in this tab (a sign-in as someone else) are not this owner's to see.
        forgetKept(me.owner.id);
        signedInOwner.current = me.owner;
        setState({ kind: 'ready', owner: me.owner });
      } catch (error) {
        setState({ kind: 'signed-out', reason: error instanceof SignInRequired && error.consentGone ? undefined : describe(error) });
      }
    };
    void start();
    return auth.onChange(() => {
      if (auth.signedIn) return;
      // The sign-in ended under the page, which the sign-in screen replaces now and the next sign-in leaves: changes
      // not saved are kept in this tab and come back once signed in again (found from outside: a mandate save whose
      // renewal failed lost every edit, past the leave guard). Taken before the pages unmount (Preact renders later).
      if (signedInOwner.current !== undefined) keepUnsaved(signedInOwner.current.id);
      // A sign-in that ends while the person's action waits on it ends the action too: say it was not done, so a
      // kill switch pressed then is not taken for done (found from outside: "You are signed out." alone).
      const reason = actionRunning()
        ? 'You are signed out, so what you just did was not done: sign in again, then do it again.'
        : 'You are signed out.';
      setState({ kind: 'signed-out', reason });
    });
  }, [auth, api]);

  if (state.kind === 'starting') {
    return (
      <main id="main" class="sign-in">
        <p role="status">Signing you in…</p>
      </main>
    );
  }
  if (state.kind === 'signed-out') return <SignIn auth={auth} reason={state.reason} />;
  return <Ready settings={settings} auth={auth} api={api} owner={state.owner} onSignedOut={(reason) => setState({ kind: 'signed-out', reason })} />;
}

// The second click of a double-click acts on nothing: a dialog's first click closed it, and the second landed on
// whatever button was then under the pointer (found from outside: a double-click on a dialog's Cancel unfroze
// another agent). Every control of the console acts on one click; a keyboard's has no click count.
document.addEventListener(
  'click',
  (event) => {
    if (event.detail > 1 && (event.target as Element | null)?.closest('button, a, input, select, summary')) {
      event.preventDefault();
      event.stopPropagation();
    }
  },
  true,
);

const settings = readSettings();
render(<App settings={settings} auth={new Auth(settings)} />, document.getElementById('app')!);
