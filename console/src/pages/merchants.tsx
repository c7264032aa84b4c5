// Merchants: register one; for each, its verification (the DNS record to publish and a "check now"), its API
// keys (a new key's secret shown once, with a copy button), its offers, and its webhook (pause and resume,
// rotate the secret, deliveries with their attempts, and re-send).
import { useState } from 'preact/hooks';
import { useLeaveGuard } from '../router.ts';
import { ok, newKey, type Schemas } from '../api.ts';
import { parseCredits } from '../money.ts';
import { Amount, ConfirmButton, CopyButton, LoadError, Outcome, PageHead, ShowMore, useAction, useConsole, useLoad, usePages, When, type Paged } from '../ui.tsx';

type KeyScope = Schemas['ApiKeyMetadata']['scopes'][number];
/** Merchants and a merchant's offers per page; "Show more" reaches the rest. */
const LIST_PAGE = 50;
/** Every scope the API knows, in words (a scope added to the API fails the type check until it is named here). */
const KEY_SCOPE_WORDS: Record<KeyScope, string> = {
  'access:check': 'check an agent’s access',
  'offers:read': 'read offers and holds',
  'offers:write': 'change offers',
  'redemptions:capture': 'capture holds',
  'redemptions:release': 'release holds',
  'redemptions:refund': 'refund',
  'earnings:read': 'read earnings',
  'webhooks:read': 'read webhook deliveries',
  'webhooks:write': 're-send deliveries',
  'events:read': 'read events',
  'evidence:read': 'read a hold’s signed evidence',
};
const KEY_SCOPES = Object.entries(KEY_SCOPE_WORDS) as Array<[KeyScope, string]>;

const text = (fields: FormData, name: string) => String(fields.get(name) ?? '').trim();

/** A secret the gateway shows once: kept on screen only until the person leaves or reloads. */
function SecretOnce({ label, secret, notice }: { label: string; secret: string; notice?: string }) {
  // Gone for good once the page is left: leaving asks first (found from outside: it vanished without a word).
  useLeaveGuard(`Leave this page? The ${label.toLowerCase()} is shown only here, now: copy it first, or you will have to make a new one.`);
  return (
    <div class="secret" role="status">
      <p>
        <strong>{label}</strong> (shown only now; store it before you leave this page):
      </p>
      <p>
        <code class="secret-value">{secret}</code> <CopyButton text={secret} label={`Copy ${label.toLowerCase()}`} />
      </p>
      {notice ? <p class="muted">{notice}</p> : null}
    </div>
  );
}

function RegisterMerchant({ onRegistered }: { onRegistered: (merchant: Schemas['Merchant']) => void }) {
  const { api } = useConsole();
  const action = useAction();
  const submit = (event: Event) => {
    event.preventDefault();
    const form = event.currentTarget as HTMLFormElement;
    const fields = new FormData(form);
    void action.run(async () => {
      const categories = text(fields, 'categories')
        .split(',')
        .map((c) => c.trim())
        .filter(Boolean);
      const created = ok(
        await api.POST('/v1/merchants', {
          params: { header: { 'Idempotency-Key': newKey() } },
          body: { name: text(fields, 'name'), domain: text(fields, 'domain'), categories },
        }),
      );
      form.reset();
      onRegistered(created.merchant);
      return `Registered ${created.merchant.name}: publish its DNS record to verify ${created.merchant.domain}.`;
    });
  };
  return (
    <details class="card">
      <summary>Register a merchant</summary>
      <form onSubmit={submit} class="stack">
        <label>
          Name <input name="name" required maxLength={100} autocomplete="organization" />
        </label>
        <label>
          Domain <input name="domain" required maxLength={253} autocomplete="off" />
          <span class="hint">A public DNS name you control, like books.example.com; you prove it with a TXT record.</span>
        </label>
        <label>
          Categories <input name="categories" required autocomplete="off" />
          <span class="hint">Comma-separated, like books, music.</span>
        </label>
        <p>
          <button type="submit" class="primary" disabled={action.busy}>
            Register merchant
          </button>
        </p>
        <Outcome action={action} />
      </form>
    </details>
  );
}

/** Where a new item went when it is past the pages shown: otherwise it silently does not appear. */
function FurtherDown({ list, added, what }: { list: Paged<{ id: string }>; added: { id: string; name: string } | undefined; what: string }) {
  const items = list.data?.items ?? [];
  if (!added || list.loading || !list.data?.hasMore || items.some((item) => item.id === added.id)) return null;
  return (
    <p class="notice" role="status">
      {added.name} is further down the list, after the {items.length} {what} shown: show more {what} below to reach it.
    </p>
  );
}

export function MerchantsPage() {
  const { api } = useConsole();
  const merchants = usePages(async (startingAfter) => {
    const page = ok(await api.GET('/v1/merchants', { params: { query: { limit: LIST_PAGE, startingAfter } } }));
    return { items: page.merchants, hasMore: page.hasMore };
  }, []);
  const [registered, setRegistered] = useState<Schemas['Merchant'] | undefined>();
  return (
    <>
      <PageHead title="Merchants" loads={[merchants]} onRefresh={merchants.reload} />
      <RegisterMerchant
        onRegistered={(merchant) => {
          setRegistered(merchant);
          merchants.reload();
        }}
      />
      <FurtherDown list={merchants} added={registered} what="merchants" />
      {merchants.data ? (
        merchants.data.items.length === 0 ? (
          <p>No merchants yet.</p>
        ) : (
          <div class="table-scroll">
            <table>
              <thead>
                <tr>
                  <th scope="col">Merchant</th>
                  <th scope="col">Domain</th>
                  <th scope="col">Verified</th>
                  <th scope="col">Webhook</th>
                </tr>
              </thead>
              <tbody>
                {merchants.data.items.map((merchant) => (
                  <tr>
                    <td>
                      <a href={`/console/merchants/${encodeURIComponent(merchant.id)}`}>{merchant.name}</a>
                    </td>
                    <td>{merchant.domain}</td>
                    <td>{merchant.verified ? 'Yes' : 'Not yet'}</td>
                    <td>{merchant.webhookUrl || 'None'}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )
      ) : null}
      <ShowMore list={merchants} label={`Show ${LIST_PAGE} more merchants`} end={`All ${merchants.data?.items.length ?? 0} merchants are shown.`} />
    </>
  );
}

function Verification({ merchant, onChanged }: { merchant: Schemas['Merchant']; onChanged: () => void }) {
  const { api } = useConsole();
  const action = useAction();
  const record = { type: 'TXT', name: `_acceptor-verify.${merchant.domain}`, value: merchant.verificationChallenge };
  return (
    <section aria-labelledby="verification-title">
      <h2 id="verification-title">Verification</h2>
      {merchant.verified ? (
        <p>
          <span class="badge active">Verified</span> {merchant.domain} is proven.
        </p>
      ) : (
        <>
          <p>Publish this DNS record, then check:</p>
          <dl class="figures">
            <div>
              <dt>Type</dt>
              <dd>{record.type}</dd>
            </div>
            <div>
              <dt>Name</dt>
              <dd>
                <code>{record.name}</code>
              </dd>
            </div>
            <div>
              <dt>Value</dt>
              <dd>
                <code>{record.value}</code> <CopyButton text={record.value} label="Copy the record's value" />
              </dd>
            </div>
          </dl>
          <button
            type="button"
            disabled={action.busy}
            onClick={() =>
              action.run(async () => {
                const result = await api.POST('/v1/merchants/{id}/verify-domain', { params: { path: { id: merchant.id }, header: { 'Idempotency-Key': newKey() } } });
                // The gateway says where it looked and what to do: wait for DNS, or (a dev gateway) publish in its own zone.
                if (result.response.status === 409) {
                  const detail = (result.error as { detail?: unknown } | undefined)?.detail;
                  return `Not found yet: ${typeof detail === 'string' ? detail : 'the record is not visible. DNS can take a few minutes; check again later.'}`;
                }
                ok(result);
                onChanged();
                return `${merchant.domain} is verified.`;
              })
            }
          >
            Check now
          </button>
          <Outcome action={action} />
        </>
      )}
    </section>
  );
}

function ApiKeys({ merchantId }: { merchantId: string }) {
  const { api } = useConsole();
  const keys = useLoad(async () => ok(await api.GET('/v1/merchants/{id}/api-keys', { params: { path: { id: merchantId } } })), [merchantId]);
  const [created, setCreated] = useState<{ secret: string; notice: string } | undefined>();
  const action = useAction();
  const revoke = useAction();
  const submit = (event: Event) => {
    event.preventDefault();
    const form = event.currentTarget as HTMLFormElement;
    const fields = new FormData(form);
    void action.run(async () => {
      const scopes = fields.getAll('scopes').map(String) as KeyScope[];
      if (scopes.length === 0) throw new Error('Choose at least one thing the key may do.');
      const answer = ok(await api.POST('/v1/merchants/{id}/api-keys', { params: { path: { id: merchantId }, header: { 'Idempotency-Key': newKey() } }, body: { name: text(fields, 'name'), scopes } }));
      setCreated(answer.secretKey ? { secret: answer.secretKey, notice: answer.notice } : undefined);
      form.reset();
      keys.reload();
      // A replay (a retry after a lost answer) carries no secret: its notice says so, and what to do.
      return answer.secretKey ? `Created the key ${answer.apiKey.name}.` : `Created the key ${answer.apiKey.name}. ${answer.notice}`;
    });
  };
  return (
    <section aria-labelledby="keys-title">
      <h2 id="keys-title">API keys</h2>
      {created ? <SecretOnce label="Secret key" secret={created.secret} notice={created.notice} /> : null}
      <LoadError error={keys.error} stale={keys.stale} />
      {keys.data && keys.data.apiKeys.length > 0 ? (
        <div class="table-scroll">
          <table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Key id</th>
                <th scope="col">Scopes</th>
                <th scope="col">Created</th>
                <th scope="col">State</th>
              </tr>
            </thead>
            <tbody>
              {keys.data.apiKeys.map((key) => (
                <tr>
                  <td>{key.name}</td>
                  <td>
                    <code>{key.keyId}</code>
                  </td>
                  <td>{key.scopes.join(', ')}</td>
                  <td>
                    <When s={key.createdAt} />
                  </td>
                  <td>
                    {key.revokedAt !== null ? (
                      'Revoked'
                    ) : (
                      <ConfirmButton
                        label={`Revoke ${key.name}`}
                        title={`Revoke the key ${key.name}?`}
                        consequence={`Every request signed with ${key.keyId} is refused from now on, on every instance of the gateway. A revoked key cannot be restored: create a new one for the server that used it.`}
                        confirmLabel="Revoke the key"
                        disabled={revoke.busy}
                        onConfirm={() =>
                          revoke.run(async () => {
                            ok(await api.POST('/v1/merchants/{id}/api-keys/{keyId}/revoke', { params: { path: { id: merchantId, keyId: key.keyId }, header: { 'Idempotency-Key': newKey() } } }));
                            keys.reload();
                            return `Revoked ${key.name}.`;
                          })
                        }
                      />
                    )}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : keys.data ? (
        <p class="muted">No keys yet.</p>
      ) : null}
      <Outcome action={revoke} />
      <details>
        <summary>Create an API key</summary>
        <form onSubmit={submit} class="stack">
          <label>
            Key name <input name="name" required maxLength={100} autocomplete="off" />
          </label>
          <fieldset>
            <legend>It may</legend>
            {KEY_SCOPES.map(([scope, label]) => (
              <label class="check">
                <input type="checkbox" name="scopes" value={scope} /> {label} <code>{scope}</code>
              </label>
            ))}
          </fieldset>
          <p>
            <button type="submit" class="primary" disabled={action.busy}>
              Create key
            </button>
          </p>
          <Outcome action={action} />
        </form>
      </details>
    </section>
  );
}

function Offers({ merchantId }: { merchantId: string }) {
  const { api } = useConsole();
  const offers = usePages(async (startingAfter) => {
    const page = ok(await api.GET('/v1/merchants/{id}/offers', { params: { path: { id: merchantId }, query: { limit: LIST_PAGE, startingAfter } } }));
    return { items: page.offers, hasMore: page.hasMore };
  }, [merchantId]);
  const [created, setCreated] = useState<Schemas['Offer'] | undefined>();
  const action = useAction();
  const submit = (event: Event) => {
    event.preventDefault();
    const form = event.currentTarget as HTMLFormElement;
    const fields = new FormData(form);
    void action.run(async () => {
      const price = parseCredits(text(fields, 'price'), 'Price');
      if ('problem' in price) throw new Error(price.problem);
      const offer = ok(
        await api.POST('/v1/merchants/{id}/offers', {
          params: { path: { id: merchantId }, header: { 'Idempotency-Key': newKey() } },
          body: { name: text(fields, 'name'), category: text(fields, 'category'), priceUc: price.uc },
        }),
      );
      form.reset();
      setCreated(offer);
      offers.reload();
      return `Created the offer ${offer.name}.`;
    });
  };
  return (
    <section aria-labelledby="offers-title">
      <h2 id="offers-title">Offers</h2>
      <LoadError error={offers.error} stale={offers.stale} />
      <FurtherDown list={offers} added={created} what="offers" />
      {offers.data && offers.data.items.length > 0 ? (
        <div class="table-scroll">
          <table>
            <thead>
              <tr>
                <th scope="col">Offer</th>
                <th scope="col">Category</th>
                <th scope="col">Price</th>
                <th scope="col">Active</th>
              </tr>
            </thead>
            <tbody>
              {offers.data.items.map((offer) => (
                <tr>
                  <td>
                    {offer.name} <code class="muted">{offer.id}</code>
                  </td>
                  <td>{offer.category}</td>
                  <td>
                    <Amount uc={offer.priceUc} />
                  </td>
                  <td>{offer.active ? 'Yes' : 'No'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : offers.data ? (
        <p class="muted">No offers yet.</p>
      ) : null}
      <ShowMore list={offers} label={`Show ${LIST_PAGE} more offers`} end={`All ${offers.data?.items.length ?? 0} offers are shown.`} />
      <details>
        <summary>Create an offer</summary>
        <form onSubmit={submit} class="stack">
          <label>
            Offer name <input name="name" required maxLength={100} autocomplete="off" />
          </label>
          <label>
            Category <input name="category" required autocomplete="off" />
          </label>
          <label>
            Price (credits) <input name="price" required inputMode="decimal" autocomplete="off" />
          </label>
          <p>
            <button type="submit" class="primary" disabled={action.busy}>
              Create offer
            </button>
          </p>
          <Outcome action={action} />
        </form>
      </details>
    </section>
  );
}

/** A delivery's attempts, read when asked. */
function Attempts({ load }: { load: () => Promise<{ attempts: Schemas['WebhookAttempt'][] }> }) {
  const attempts = useLoad(load, []);
  if (attempts.error) return <LoadError error={attempts.error} alert />;
  if (!attempts.data) return <p class="muted">Loading…</p>;
  if (attempts.data.attempts.length === 0) return <p class="muted">No attempt yet.</p>;
  return (
    <ol class="attempts">
      {attempts.data.attempts.map((attempt) => (
        <li>
          Attempt {attempt.attempt}: {attempt.outcome}
          {attempt.status !== null ? `, HTTP ${attempt.status}` : ''}
          {attempt.error ? `, ${attempt.error}` : ''}
          {attempt.durationMs !== null ? `, ${attempt.durationMs} ms` : ''}, <When s={Math.floor(attempt.startedAtMs / 1000)} />
        </li>
      ))}
    </ol>
  );
}

/** Deliveries shown per page (the API takes up to 100). */
export const DELIVERIES_PAGE = 20;

/** Deliveries, newest first, a page at a time, each with its attempts on request and a re-send. */
export function Deliveries({
  list,
  attempts,
  resend,
}: {
  list: Paged<Schemas['WebhookDelivery']>;
  attempts: (deliveryId: string) => Promise<{ attempts: Schemas['WebhookAttempt'][] }>;
  resend?: (deliveryId: string) => Promise<void>;
}) {
  const [open, setOpen] = useState<string | undefined>();
  const action = useAction();
  if (!list.data) return <p class="muted">Loading…</p>;
  const deliveries = list.data.items;
  if (deliveries.length === 0) return <p class="muted">No deliveries yet.</p>;
  return (
    <>
      <ul class="deliveries">
        {deliveries.map((delivery) => (
          <li class="card">
            <p>
              <strong>{delivery.eventType}</strong> · {delivery.state} · {delivery.attempts} attempt{delivery.attempts === 1 ? '' : 's'}
              {delivery.lastStatus !== null ? ` · last HTTP ${delivery.lastStatus}` : ''}
              {delivery.lastError ? ` · ${delivery.lastError}` : ''} · <When s={delivery.createdAt} />
            </p>
            <button type="button" aria-expanded={open === delivery.id} onClick={() => setOpen(open === delivery.id ? undefined : delivery.id)}>
              {open === delivery.id ? 'Hide attempts' : 'Show attempts'} of {delivery.eventType}
            </button>{' '}
            {resend ? (
              <button type="button" disabled={action.busy} onClick={() => action.run(async () => (await resend(delivery.id), 'Queued to be sent again.'))}>
                Re-send {delivery.eventType}
              </button>
            ) : null}
            {open === delivery.id ? <Attempts load={() => attempts(delivery.id)} /> : null}
          </li>
        ))}
      </ul>
      <ShowMore list={list} label={`Show ${DELIVERIES_PAGE} older deliveries`} end={`All ${deliveries.length} deliveries are shown.`} />
      <Outcome action={action} />
    </>
  );
}

function MerchantWebhook({ merchant }: { merchant: Schemas['Merchant'] }) {
  const { api } = useConsole();
  const path = { path: { id: merchant.id } };
  const configured = useLoad(async () => ok(await api.GET('/v1/merchants/{id}/webhook', { params: path })).configuration, [merchant.id]);
  const deliveries = usePages(async (startingAfter) => {
    const page = ok(await api.GET('/v1/merchants/{id}/webhook/deliveries', { params: { ...path, query: { limit: DELIVERIES_PAGE, startingAfter } } }));
    return { items: page.deliveries, hasMore: page.hasMore };
  }, [merchant.id]);
  const reload = () => {
    configured.reload();
    deliveries.reload();
  };
  const [secret, setSecret] = useState<string | undefined>();
  const action = useAction();
  const configure = (event: Event) => {
    event.preventDefault();
    const fields = new FormData(event.currentTarget as HTMLFormElement);
    void action.run(async () => {
      const answer = ok(await api.PUT('/v1/merchants/{id}/webhook', { params: { ...path, header: { 'Idempotency-Key': newKey() } }, body: { url: text(fields, 'url') } }));
      setSecret(answer.webhookSecret);
      reload();
      return answer.notice && !answer.webhookSecret ? `Webhook saved. ${answer.notice}` : 'Webhook saved.';
    });
  };
  const configuration = configured.data;
  return (
    <section aria-labelledby="webhook-title">
      <h2 id="webhook-title">Webhook</h2>
      {secret ? <SecretOnce label="Signing secret" secret={secret} /> : null}
      <LoadError error={configured.error ?? deliveries.error} stale={configured.stale || deliveries.stale} />
      {configuration ? (
        <>
          {configuration.configured ? (
            <p>
              Sends to <code>{configuration.url}</code> ·{' '}
              {configuration.enabled ? 'delivering' : configuration.disabledReason === 'failing' ? 'stopped: its endpoint kept failing' : 'paused'}
              {configuration.previousSecretExpiresAt ? (
                <>
                  {' '}
                  · the previous secret signs too until <When s={configuration.previousSecretExpiresAt} />
                </>
              ) : null}
            </p>
          ) : (
            <p class="muted">No webhook yet.</p>
          )}
          <form onSubmit={configure} class="inline-form">
            <label>
              Webhook URL <input name="url" type="url" required defaultValue={configuration.url} autocomplete="off" />
            </label>
            <button type="submit" disabled={action.busy || !merchant.verified}>
              Save webhook
            </button>
          </form>
          {!merchant.verified ? <p class="hint">Verify the domain first: the webhook must be on it.</p> : null}
          {configuration.configured ? (
            <p>
              <button
                type="button"
                disabled={action.busy}
                onClick={() =>
                  action.run(async () => {
                    ok(await api.PATCH('/v1/merchants/{id}/webhook', { params: { ...path, header: { 'Idempotency-Key': newKey() } }, body: { enabled: !configuration.enabled } }));
                    reload();
                    return configuration.enabled ? 'Paused: events are kept and sent when you resume.' : 'Resumed.';
                  })
                }
              >
                {configuration.enabled ? 'Pause webhook' : 'Resume webhook'}
              </button>{' '}
              <button
                type="button"
                disabled={action.busy}
                onClick={() =>
                  action.run(async () => {
                    const answer = ok(await api.POST('/v1/merchants/{id}/webhook/rotate-secret', { params: { ...path, header: { 'Idempotency-Key': newKey() } }, body: {} }));
                    setSecret(answer.webhookSecret);
                    reload();
                    return answer.webhookSecret ? 'New secret issued; the old one keeps signing during the overlap.' : `New secret issued. ${answer.notice ?? ''}`.trim();
                  })
                }
              >
                Rotate secret
              </button>
            </p>
          ) : null}
          <Outcome action={action} />
          <h3>Deliveries</h3>
          <Deliveries
            list={deliveries}
            attempts={async (deliveryId) => ok(await api.GET('/v1/merchants/{id}/webhook/deliveries/{deliveryId}/attempts', { params: { path: { id: merchant.id, deliveryId } } }))}
            resend={async (deliveryId) => {
              ok(await api.POST('/v1/merchants/{id}/webhook/deliveries/{deliveryId}/resend', { params: { path: { id: merchant.id, deliveryId }, header: { 'Idempotency-Key': newKey() } } }));
              reload();
            }}
          />
        </>
      ) : null}
    </section>
  );
}

export function MerchantPage({ id }: { id: string }) {
  const { api } = useConsole();
  const merchant = useLoad(async () => ok(await api.GET('/v1/merchants/{id}', { params: { path: { id } } })), [id]);
  const earnings = useLoad(async () => ok(await api.GET('/v1/merchants/{id}/earnings', { params: { path: { id } } })), [id]);
  const name = merchant.data?.merchant.name ?? 'Merchant';
  return (
    <>
      <p class="crumbs">
        <a href="/console/merchants">Merchants</a> /
      </p>
      <PageHead title={name} loads={[merchant, earnings]} />
      {merchant.data ? (
        <>
          <p>
            <code class="muted">{merchant.data.merchant.id}</code> · {merchant.data.merchant.domain} · categories {merchant.data.merchant.categories.join(', ')}
            {earnings.data ? (
              <>
                {' '}
                · earned <Amount uc={earnings.data.earnedUc} />
              </>
            ) : null}
          </p>
          <Verification merchant={merchant.data.merchant} onChanged={merchant.reload} />
          <ApiKeys merchantId={id} />
          <Offers merchantId={id} />
          <MerchantWebhook merchant={merchant.data.merchant} />
        </>
      ) : null}
    </>
  );
}
