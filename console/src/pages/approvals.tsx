// Approvals: the top-ups and purchases that wait for the owner, each with its agent, merchant, offer and
// amount; approve or decline here, or on its own approval page (the standalone page stays; each links to it).
// Approving and declining take a human session, not the console's OAuth token (the API's rule: an owner
// token may be held by an application), so the person confirms at the identity provider first.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiProblem, HumanSessionRequired, humanApi, newKey, ok, type Schemas } from '../api.ts';
import { credits, dollars } from '../money.ts';
import { Outcome, PageHead, useAction, useConsole, useLoad, When, whenText } from '../ui.tsx';

type Approval = Schemas['OwnerApproval'];
type Verb = 'approve' | 'decline';

/** One approval; its answer is said by the page, since the answered approval leaves the list. */
/** Whose words a top-up's reason is (`requestedBy`), as the approval page says it. */
const REASON_BY: Record<NonNullable<Approval['requestedBy']>, string> = {
  agent: "Reason, in the agent's own words",
  owner: "Reason, in the owner's words (the owner asked for this top-up)",
  gateway: "Reason, in the gateway's words (the gateway asked for this top-up when the agent's credit fell short)",
};

/** What a card's buttons name it by: its kind, agent, amount and merchant (`which`). */
const likeness = (approval: Approval) => `${approval.kind}:${approval.agentId}:${approval.amountUc}:${approval.merchant?.id ?? ''}`;

/**
 * What tells each card of a list apart from another one alike (same kind, agent, amount and merchant: two purchases
 * of one offer), for its buttons' names: when it was asked, and its id when that is the same minute too (found from
 * outside: two cards' headings and buttons read word for word the same). Nothing for a card unlike the others.
 */
export function apartBy(approvals: readonly Approval[]): Map<string, string> {
  const apart = new Map<string, string>();
  for (const approval of approvals) {
    const alike = approvals.filter((other) => other !== approval && likeness(other) === likeness(approval));
    if (alike.length === 0) continue;
    const asked = whenText(approval.createdAt, true);
    const sameMinute = alike.some((other) => whenText(other.createdAt, true) === asked);
    apart.set(approval.id, `, asked ${asked}${sameMinute ? `, ${approval.id}` : ''}`);
  }
  return apart;
}

function ApprovalCard({ approval, apart = '', onAnswered }: { approval: Approval; apart?: string; onAnswered: (said: string) => void }) {
  const { humanSession, forgetHumanSession } = useConsole();
  const action = useAction();
  const what = approval.kind === 'topup' ? 'top-up' : 'purchase';
  // A purchase approved and not used yet (the page's second list): it can only be withdrawn.
  const standing = approval.status === 'approved';
  const refused = approval.kind === 'purchase' && approval.agentEffectiveStatus !== 'active';
  // In each button's name, so that two cards of one agent are told apart by a screen reader's list of buttons or a
  // spoken command (found from outside: "Approve the purchase for Owl" twice).
  const which = `${credits(approval.amountUc)} credits${approval.merchant ? ` at ${approval.merchant.name}` : ''}`;
  // `apart` only where another card is alike, and only in the names a screen reader says: what a sighted person reads
  // in the card's "Asked". Each name begins with the button's visible words (WCAG 2.5.3, label in name).
  const verbs = { approve: `Approve the ${what}`, decline: standing ? 'Withdraw the approval' : `Decline the ${what}` };
  const named = (verb: Verb) => (apart ? `${verbs[verb]} for ${approval.agentName} (${which}${apart})` : undefined);
  const answer = (verb: Verb) =>
    action.run(async () => {
      let said: string | undefined;
      const send = async () => {
        const api = humanApi(await humanSession(`${verb === 'approve' ? 'Approving' : 'Declining'} a ${what}`));
        const params = { path: { id: approval.id }, header: { 'Idempotency-Key': newKey() } };
        if (approval.kind === 'topup') {
          return ok(verb === 'approve' ? await api.POST('/v1/payments/topups/{id}/approve', { params, body: {} }) : await api.POST('/v1/payments/topups/{id}/decline', { params, body: {} }));
        }
        if (verb === 'approve') return ok(await api.POST('/v1/payments/purchases/{id}/approve', { params, body: {} }));
        // The API's decline also withdraws an approval not used yet: this card was read while the purchase waited, so
        // one answered meanwhile (another tab, its approval page) is said, not silently withdrawn.
        const now = ok(await api.GET('/v1/payments/purchases/{id}', { params: { path: params.path } }));
        if (now.status !== approval.status) {
          said = `Not ${standing ? 'withdrawn' : 'declined'}: the purchase for ${approval.agentName} was ${now.status} meanwhile (in another tab, on its approval page, or by the agent's retry).`;
          return now;
        }
        return ok(await api.POST('/v1/payments/purchases/{id}/decline', { params, body: {} }));
      };
      try {
        try {
          await send();
        } catch (error) {
          if (!(error instanceof HumanSessionRequired)) throw error;
          forgetHumanSession();
          await send();
        }
      } catch (error) {
        // Answered meanwhile (another tab, its approval page, its deadline): the page says so in its notice and reads
        // the list again, so the card leaves instead of staying with live buttons under an older notice (found from outside).
        if (error instanceof ApiProblem && error.status === 409) {
          onAnswered(`Not ${verb === 'approve' ? 'approved' : standing ? 'withdrawn' : 'declined'}: ${error.detail}.`);
          return undefined;
        }
        // A confirmation by another person than this owner reads the approval as not found: forget it, so the next
        // click asks again, rather than refusing every answer until that confirmation lapses.
        if (!(error instanceof ApiProblem && error.status === 404)) throw error;
        forgetHumanSession();
        throw new Error(`Not found for the person who confirmed. If you confirmed with another email than this console's owner, confirm again as the owner.`);
      }
      onAnswered(
        said ??
        (verb === 'decline'
          ? standing
            ? `Withdrew the approval of ${approval.agentName}'s purchase: its retry will be refused.`
            : `Declined the ${what} of ${approval.agentName}.`
          : approval.kind === 'topup'
            ? `Approved: ${approval.agentName} received ${credits(approval.amountUc)} credits.`
            : `Approved: ${approval.agentName}'s retry of the purchase goes through.`),
      );
    });
  return (
    <li class="card approval">
      <h2 tabIndex={-1}>
        {approval.kind === 'topup' ? 'Top-up' : 'Purchase'} for {approval.agentName}
        {standing ? ', approved' : ''}
      </h2>
      <dl class="figures">
        <div>
          {/* Names are the agents' own choice (a delegate may take its parent's): the id tells them apart. */}
          <dt>Agent</dt>
          <dd>
            <a href={`/console/agents/${encodeURIComponent(approval.agentId)}`}>
              <bdi>{approval.agentName}</bdi>
            </a>{' '}
            <code class="muted">{approval.agentId}</code>
            {approval.agentParent ? (
              <>
                {' '}
                <span class="delegate-of">
                  a delegate of{' '}
                  <a href={`/console/agents/${encodeURIComponent(approval.agentParent.id)}`}>
                    <bdi>{approval.agentParent.name}</bdi>
                  </a>{' '}
                  <code class="muted">{approval.agentParent.id}</code>, which named it; it spends its root&apos;s credit
                </span>
              </>
            ) : null}
            {approval.agentEffectiveStatus !== 'active' ? (
              <>
                {' '}
                <span class="badge frozen">{approval.agentEffectiveStatus === 'retired' ? 'Retired' : 'Frozen'}</span>
              </>
            ) : null}
          </dd>
        </div>
        <div>
          <dt>Amount</dt>
          <dd>
            {credits(approval.amountUc)} credits{approval.kind === 'topup' ? ` (${dollars(approval.amountUc)})` : ''}
          </dd>
        </div>
        {approval.merchant ? (
          <div>
            <dt>Merchant</dt>
            <dd>
              <bdi>{approval.merchant.name}</bdi> <span class="muted">({approval.merchant.domain})</span>
            </dd>
          </div>
        ) : null}
        {approval.offer ? (
          <div>
            <dt>Offer</dt>
            <dd>{approval.offer.name}</dd>
          </div>
        ) : null}
        {approval.resource !== undefined ? (
          <div>
            <dt>Resource</dt>
            <dd>
              <code>{approval.resource}</code>
            </dd>
          </div>
        ) : null}
        {approval.reason !== undefined ? (
          <div>
            {/* Whoever wrote it, quoted and kept as written, line breaks too (found from outside); execute's automatic top-up is the gateway's words, not the agent's. */}
            <dt>{REASON_BY[approval.requestedBy ?? 'agent']}</dt>
            <dd>
              <q class="agent-words">{approval.reason}</q>
            </dd>
          </div>
        ) : null}
        <div>
          <dt>Asked</dt>
          <dd>
            <When s={approval.createdAt} zoned />
          </dd>
        </div>
        <div>
          <dt>Expires</dt>
          <dd>
            {/* With its zone, as on the approval page: a deadline minutes away is read against a clock (found from outside). */}
            <When s={approval.expiresAt} zoned />
          </dd>
        </div>
      </dl>
      {approval.agentEffectiveStatus !== 'active' ? (
        <p class="error" id={`stopped-${approval.id}`}>
          {approval.kind === 'topup'
            ? `${approval.agentName} is ${approval.agentEffectiveStatus}: a top-up approved now credits a balance it cannot spend${approval.agentEffectiveStatus === 'frozen' ? ' until it is unfrozen' : ''}.`
            : standing
              ? `${approval.agentName} is ${approval.agentEffectiveStatus}: its retry is refused${approval.agentEffectiveStatus === 'frozen' ? ' until it is unfrozen' : ''}, while this approval stands until it expires.`
              : approval.agentEffectiveStatus === 'frozen'
                ? `${approval.agentName} is frozen: this purchase cannot be approved until it is unfrozen (its retry would be refused). You can decline it.`
                : `${approval.agentName} is retired: it can never spend again, so this purchase cannot be approved. Decline it.`}
        </p>
      ) : null}
      <p>
        {/* The gateway refuses to approve a stopped agent's purchase (found from outside: the click was only refused). */}
        {standing ? null : (
          <button
            type="button"
            class="primary"
            disabled={action.busy || refused}
            aria-describedby={refused ? `stopped-${approval.id}` : undefined}
            aria-label={named('approve')}
            onClick={() => answer('approve')}
          >
            {verbs.approve} for {approval.agentName} ({which})
          </button>
        )}{' '}
        <button type="button" disabled={action.busy} aria-label={named('decline')} onClick={() => answer('decline')}>
          {verbs.decline} for {approval.agentName} ({which})
        </button>{' '}
        <a href={approval.approvalUrl} aria-label={`Open its approval page: the ${what} for ${approval.agentName} (${which}${apart})`}>
          Open its approval page
        </a>
      </p>
      <Outcome action={action} />
    </li>
  );
}

export function ApprovalsPage() {
  const { api } = useConsole();
  const approvals = useLoad(async () => ok(await api.GET('/v1/owner/approvals', { params: { query: { status: 'pending', limit: 100 } } })), []);
  // Purchases approved and not used yet: each stands until its deadline, and may be withdrawn (found from outside:
  // only the API showed them, so an approval its agent would not retry, or could not yet, could not be taken back here).
  const standing = useLoad(async () => ok(await api.GET('/v1/owner/approvals', { params: { query: { status: 'approved', limit: 100 } } })), []);
  const reload = () => {
    approvals.reload();
    standing.reload();
  };
  const [said, setSaid] = useState('');
  // An answered card leaves the list, and with it the focus of a person using the keyboard, which fell to the page's
  // body (the next card was 11 Tabs away). Once the list is read again, the card now in its place (or the last one)
  // takes the focus on its heading, not on a button a second Enter would press; with none left, the outcome does.
  const [answeredAt, setAnsweredAt] = useState<{ index: number; listBefore: unknown } | undefined>();
  const cardsRef = useRef<HTMLUListElement>(null);
  const saidRef = useRef<HTMLParagraphElement>(null);
  useEffect(() => {
    if (answeredAt === undefined || approvals.loading || approvals.data === answeredAt.listBefore) return;
    const headings = cardsRef.current?.querySelectorAll<HTMLElement>(':scope > li > h2') ?? [];
    (headings[Math.min(answeredAt.index, headings.length - 1)] ?? saidRef.current)?.focus();
    setAnsweredAt(undefined);
  }, [answeredAt, approvals.data, approvals.loading]);
  const pendingApart = apartBy(approvals.data?.approvals ?? []);
  const standingApart = apartBy(standing.data?.approvals ?? []);
  return (
    <>
      <PageHead title="Approvals" loads={[approvals, standing]} onRefresh={reload} />
      <p class="muted">Top-ups and purchases above an agent's approval threshold wait here for your answer.</p>
      <p class="notice" role="status" tabIndex={-1} ref={saidRef}>
        {said}
      </p>
      {approvals.data ? (
        approvals.data.approvals.length === 0 ? (
          <p>Nothing waits for you.</p>
        ) : (
          <ul class="cards" ref={cardsRef}>
            {approvals.data.approvals.map((approval, index) => (
              <ApprovalCard
                key={`${approval.kind}:${approval.id}`}
                approval={approval}
                apart={pendingApart.get(approval.id)}
                onAnswered={(message) => {
                  setSaid(message);
                  setAnsweredAt({ index, listBefore: approvals.data });
                  reload();
                }}
              />
            ))}
          </ul>
        )
      ) : null}
      {approvals.data?.hasMore ? <p class="muted">Only the first 100 waiting are shown: answer some, then Refresh, to see the rest.</p> : null}
      {standing.data && standing.data.approvals.length > 0 ? (
        <section aria-labelledby="standing-title">
          <h2 id="standing-title">Approved, not used yet</h2>
          <p class="muted">Purchases you approved that the agent's retry has not made yet. Each stands until it expires; withdraw one to refuse its retry.</p>
          <ul class="cards">
            {standing.data.approvals.map((approval) => (
              <ApprovalCard
                key={`approved:${approval.id}`}
                approval={approval}
                apart={standingApart.get(approval.id)}
                onAnswered={(message) => {
                  setSaid(message);
                  saidRef.current?.focus();
                  reload();
                }}
              />
            ))}
          </ul>
        </section>
      ) : null}
    </>
  );
}
