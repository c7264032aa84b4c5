// Agents: each with its status, available and held balance and a bar per budget of its mandate; register an
// agent; freeze and unfreeze.
import { useState } from 'preact/hooks';
import { ApiProblem, ok, newKey, type Api, type Schemas } from '../api.ts';
import { credits } from '../money.ts';
import { Amount, BudgetBar, ConfirmButton, LoadError, Outcome, PageHead, ShowMore, useAction, useConsole, useLoad, usePages, When } from '../ui.tsx';

type Agent = Schemas['Agent'];

/** Agents per page: each card reads its balance and mandate, so a page stays a few dozen requests. */
const AGENTS_PAGE = 50;

/**
 * What the agent may do now: its own freeze, an ancestor's (which its own Unfreeze does not lift, so the badge
 * names the ancestor: `FrozenBy`), or retirement. A replay stored before `effectiveStatus` existed falls back to
 * `status`. `names`: the agents the page holds already, by id, so an ancestor among them is not read again.
 */
export function StatusBadge({ agent, names }: { agent: Pick<Agent, 'status' | 'effectiveStatus' | 'frozenBy'>; names?: ReadonlyMap<string, string> }) {
  const effective = agent.effectiveStatus ?? agent.status;
  if (effective === 'retired') return <span class="badge frozen">Retired</span>;
  if (effective === 'frozen' && agent.status !== 'frozen' && agent.frozenBy) return <FrozenBy id={agent.frozenBy} known={names?.get(agent.frozenBy)} />;
  return <span class={`badge ${effective}`}>{effective === 'frozen' ? 'Frozen' : 'Active'}</span>;
}

/** How long one read of an agent serves every badge that asks for it: a Refresh after that reads its name again. */
const AGENT_READ_SHARED_MS = 5_000;
/** Reads of one agent by id, shared by the badges that ask at once (fifty delegates of one frozen root read it once). */
const agentReads = new Map<string, { readAtMs: number; read: Promise<Agent> }>();

function readAgent(api: Api, id: string): Promise<Agent> {
  const nowMs = Date.now();
  for (const [readId, entry] of agentReads) if (nowMs - entry.readAtMs >= AGENT_READ_SHARED_MS) agentReads.delete(readId);
  let entry = agentReads.get(id);
  if (entry === undefined) {
    entry = { readAtMs: nowMs, read: api.GET('/v1/owner/agents/{id}', { params: { path: { id } } }).then(ok) };
    agentReads.set(id, entry);
  }
  return entry.read;
}

/**
 * The ancestor whose freeze stops an agent, by its name and linked to its page, its id beside as secondary text (a
 * delegate may take its parent's name; the id tells them apart). It read "Frozen by agt_01…", an id alone (found from
 * outside). The name is the page's own when it holds that agent (`known`), else read (GET /v1/owner/agents/{id}); an
 * ancestor that cannot be read (not found, or the read failed) is "an ancestor", by its id.
 */
function FrozenBy({ id, known }: { id: string; known: string | undefined }) {
  const { api } = useConsole();
  const ancestor = useLoad(async () => known ?? (await readAgent(api, id)).name, [id, known]);
  const notFound = ancestor.error instanceof ApiProblem && ancestor.error.status === 404;
  return (
    <span>
      <span class="badge frozen" title="An ancestor's freeze stops this agent; unfreeze that agent to lift it.">
        Frozen by{' '}
        {ancestor.data !== undefined ? (
          <a href={`/console/agents/${encodeURIComponent(id)}`}>
            <bdi>{ancestor.data}</bdi>
          </a>
        ) : (
          'an ancestor'
        )}
      </span>{' '}
      <span class="hint">
        (its ancestor <code>{id}</code>
        {notFound ? ', not found among your agents' : ''})
      </span>
    </span>
  );
}

/**
 * A delegate owns no credit: its balance is its root's pool, shared by the whole tree, so its figures say so and
 * name the root, rather than read as credit of its own (each delegate's card showed the root's whole balance).
 */
export function TreeFunds({ fundedBy }: { fundedBy: string | undefined }) {
  if (fundedBy === undefined) return null;
  return (
    <p class="muted">
      A delegate: these figures are the credit of its root agent,{' '}
      <a href={`/console/agents/${encodeURIComponent(fundedBy)}`}>
        <code>{fundedBy}</code>
      </a>
      , shared by the whole tree. What it may still spend itself is what its budgets have left.
    </p>
  );
}

/** "Available", or "Available to its tree" for a delegate (`TreeFunds`). */
export const treeLabel = (label: string, fundedBy: string | undefined) => (fundedBy === undefined ? label : `${label} (its tree's)`);

/**
 * Freeze or unfreeze: the agent's next hold is refused while frozen. The kill switch goes further: it also releases
 * the outstanding holds of the agent and its delegates and withdraws their vouchers, so no merchant can capture
 * them (`releaseHolds`); offered beside a plain freeze, and on a frozen agent, whose holds a plain freeze left. A
 * retired agent is stopped for good: nothing to offer.
 */
export function FreezeButton({ agent, onChanged }: { agent: Agent; onChanged: () => void }) {
  const { api } = useConsole();
  const action = useAction();
  if ((agent.effectiveStatus ?? agent.status) === 'retired') return null;
  const frozen = agent.status === 'frozen';
  const params = () => ({ path: { id: agent.id }, header: { 'Idempotency-Key': newKey() } });
  const freeze = (releaseHolds: boolean) =>
    action.run(async () => {
      const answer = ok(await api.POST('/v1/owner/agents/{id}/freeze', { params: params(), body: releaseHolds ? { releaseHolds: true } : {} }));
      onChanged();
      if (!releaseHolds) return `${agent.name} is frozen: its next purchase will be refused. Its outstanding holds stay, and their merchants can still capture them.`;
      const report = answer.freeze;
      return `${agent.name} is frozen, and ${report.releasedHolds} outstanding hold${report.releasedHolds === 1 ? '' : 's'} released: ${credits(report.releasedUc)} credits are back, and their vouchers can no longer be captured.`;
    });
  return (
    <span class="inline-action">
      {frozen ? (
        <button
          type="button"
          disabled={action.busy}
          onClick={() =>
            action.run(async () => {
              ok(await api.POST('/v1/owner/agents/{id}/unfreeze', { params: params(), body: {} }));
              onChanged();
              return `${agent.name} can spend again.`;
            })
          }
        >
          {`Unfreeze ${agent.name}`}
        </button>
      ) : (
        <button type="button" disabled={action.busy} onClick={() => freeze(false)}>
          {`Freeze ${agent.name}`}
        </button>
      )}
      <ConfirmButton
        label={frozen ? `Release ${agent.name}'s holds` : `Freeze ${agent.name} and release its holds`}
        title={frozen ? `Release ${agent.name}'s holds?` : `Freeze ${agent.name} and release its holds?`}
        consequence={
          `Every outstanding hold of ${agent.name} and of its delegates is released, its credit back, and its voucher revoked: ` +
          'their merchants are told, and can no longer capture them, even after you unfreeze. This cannot be undone.'
        }
        confirmLabel={frozen ? 'Release the holds' : 'Freeze and release'}
        disabled={action.busy}
        onConfirm={() => freeze(true)}
      />
      <Outcome action={action} />
    </span>
  );
}

/**
 * Whether the mandate is in force now, said where the owner looks: outside its window the agent's status still
 * reads Active, while every purchase is refused (403 SCOPE_FORBIDDEN, mandate_not_valid). The window is
 * [notBefore, notAfter), as the gateway applies it. On the agents list and on the agent's page.
 */
export function MandateWindow({ mandate }: { mandate: Pick<Schemas['Mandate'], 'notBefore' | 'notAfter'> }) {
  const nowS = Date.now() / 1000;
  if (mandate.notBefore !== null && nowS < mandate.notBefore) {
    return (
      <p class="error" role="status">
        Its mandate is not in force yet: every purchase is refused until <When s={mandate.notBefore} />.
      </p>
    );
  }
  if (mandate.notAfter !== null && nowS >= mandate.notAfter) {
    return (
      <p class="error" role="status">
        Its mandate ended <When s={mandate.notAfter} />: every purchase is refused. Change "Valid until" in its mandate to let it spend again.
      </p>
    );
  }
  return null;
}

function AgentRow({ agent, names, tick, onChanged }: { agent: Agent; names: ReadonlyMap<string, string>; tick: number; onChanged: () => void }) {
  const { api } = useConsole();
  const figures = useLoad(async () => {
    const [balance, mandate] = await Promise.all([
      api.GET('/v1/owner/agents/{id}/balance', { params: { path: { id: agent.id } } }).then(ok),
      api.GET('/v1/owner/agents/{id}/mandate', { params: { path: { id: agent.id } } }).then(ok),
    ]);
    return { balance, mandate };
  }, [agent.id, agent.status, agent.updatedAt, tick]);
  return (
    <li class="card agent">
      <div class="card-head">
        <h2>
          <a href={`/console/agents/${encodeURIComponent(agent.id)}`}>{agent.name}</a>
        </h2>
        <StatusBadge agent={agent} names={names} />
        <code class="muted">{agent.id}</code>
      </div>
      <LoadError error={figures.error} stale={figures.stale} />
      {figures.data ? <MandateWindow mandate={figures.data.mandate} /> : null}
      {figures.data ? (
        <>
          <dl class="figures">
            <div>
              <dt>{treeLabel('Available', figures.data.balance.fundedBy)}</dt>
              <dd>
                <Amount uc={figures.data.balance.availableUc} />
              </dd>
            </div>
            <div>
              <dt>{treeLabel('Held', figures.data.balance.fundedBy)}</dt>
              <dd>
                <Amount uc={figures.data.balance.heldUc} />
              </dd>
            </div>
          </dl>
          <TreeFunds fundedBy={figures.data.balance.fundedBy} />
          {figures.data.mandate.usage.length > 0 ? (
            figures.data.mandate.usage.map((usage) => <BudgetBar usage={usage} timeZone={figures.data!.mandate.timeZone} />)
          ) : (
            <p class="muted">No budget set.</p>
          )}
        </>
      ) : figures.loading ? (
        <p class="muted">Loading…</p>
      ) : null}
      <FreezeButton agent={agent} onChanged={onChanged} />
    </li>
  );
}

function RegisterAgent({ onRegistered }: { onRegistered: (agent: Agent) => void }) {
  const { api, settings } = useConsole();
  const action = useAction();
  const submit = (event: Event) => {
    event.preventDefault();
    const form = event.currentTarget as HTMLFormElement;
    const fields = new FormData(form);
    void action.run(async () => {
      const name = String(fields.get('name') ?? '').trim();
      const subject = String(fields.get('subject') ?? '').trim();
      const issuer = String(fields.get('issuer') ?? '').trim();
      if (!name || !subject || !issuer) throw new Error('Give the agent a name, and the issuer and subject of its identity.');
      const agent = ok(await api.POST('/v1/owner/agents', { params: { header: { 'Idempotency-Key': newKey() } }, body: { name, identity: { issuer, subject } } }));
      form.reset();
      onRegistered(agent);
      return `Registered ${agent.name}.`;
    });
  };
  return (
    <details class="card">
      <summary>Register an agent</summary>
      <form onSubmit={submit} class="stack">
        <label>
          Name <input name="name" required maxLength={100} autocomplete="off" />
        </label>
        <label>
          Identity issuer <input name="issuer" required defaultValue={settings.agentIssuer ?? ''} autocomplete="off" />
          <span class="hint">The agent identity provider that signs the agent's tokens.</span>
        </label>
        <label>
          Identity subject <input name="subject" required maxLength={200} autocomplete="off" />
          <span class="hint">The agent's subject (its sub claim) at that provider.</span>
        </label>
        <p>
          <button type="submit" class="primary" disabled={action.busy}>
            Register agent
          </button>
        </p>
        <Outcome action={action} />
      </form>
    </details>
  );
}

export function AgentsPage() {
  const { api } = useConsole();
  const agents = usePages(async (startingAfter) => {
    const page = ok(await api.GET('/v1/owner/agents', { params: { query: { limit: AGENTS_PAGE, startingAfter } } }));
    return { items: page.agents, hasMore: page.hasMore };
  }, []);
  const [tick, setTick] = useState(0);
  const [registered, setRegistered] = useState<Agent | undefined>();
  const refresh = () => {
    setTick((n) => n + 1);
    agents.reload();
  };
  const items = agents.data?.items ?? [];
  const names = new Map(items.map((agent) => [agent.id, agent.name]));
  // A new agent past the pages shown would silently not appear, and with it its kill switch: say where it is.
  const registeredFurther = registered !== undefined && !agents.loading && agents.data?.hasMore === true && !items.some((agent) => agent.id === registered.id);
  return (
    <>
      <PageHead title="Agents" loads={[agents]} onRefresh={refresh} />
      <RegisterAgent
        onRegistered={(agent) => {
          setRegistered(agent);
          agents.reload();
        }}
      />
      {registeredFurther ? (
        <p class="notice" role="status">
          {registered.name} is further down the list, after the {items.length} agents shown: show more agents below to reach it.
        </p>
      ) : null}
      {agents.data ? (
        items.length === 0 ? (
          <p>No agents yet: register one above.</p>
        ) : (
          <ul class="cards">
            {items.map((agent) => (
              <AgentRow key={agent.id} agent={agent} names={names} tick={tick} onChanged={refresh} />
            ))}
          </ul>
        )
      ) : null}
      <ShowMore list={agents} label={`Show ${AGENTS_PAGE} more agents`} end={`All ${items.length} agents are shown.`} />
    </>
  );
}
