// The owner webhook: where the events of the owner's agents go (top-ups, intents, purchases waiting for
// approval), the events themselves (kept 30 days, delivered or not) and the deliveries with their attempts.
import { useState } from 'preact/hooks';
import { ok, newKey } from '../api.ts';
import { CopyButton, LoadError, Outcome, PageTitle, useAction, useConsole, useLoad, When } from '../ui.tsx';
import { Deliveries } from './merchants.tsx';
import { useLeaveGuard } from '../router.ts';

export function OwnerWebhookPage() {
  const { api } = useConsole();
  const webhook = useLoad(async () => {
    const [configuration, deliveries, events] = await Promise.all([
      api.GET('/v1/owner/webhook').then(ok),
      api.GET('/v1/owner/webhook/deliveries', { params: { query: { limit: 20 } } }).then(ok),
      api.GET('/v1/owner/events', { params: { query: { limit: 20 } } }).then(ok),
    ]);
    return { configuration: configuration.configuration, deliveries: deliveries.deliveries, events: events.events };
  }, []);
  const [secret, setSecret] = useState<string | undefined>();
  useLeaveGuard(secret ? 'Leave this page? The signing secret is shown only here, now: copy it first, or you will have to rotate it.' : undefined);
  const action = useAction();
  const save = (event: Event) => {
    event.preventDefault();
    const fields = new FormData(event.currentTarget as HTMLFormElement);
    void action.run(async () => {
      const answer = ok(await api.PUT('/v1/owner/webhook', { params: { header: { 'Idempotency-Key': newKey() } }, body: { url: String(fields.get('url') ?? '').trim() } }));
      setSecret(answer.webhookSecret);
      webhook.reload();
      return answer.notice;
    });
  };
  const configuration = webhook.data?.configuration;
  return (
    <>
      <div class="page-head">
        <PageTitle title="Owner webhook">Owner webhook</PageTitle>
        <button type="button" onClick={webhook.reload} disabled={webhook.loading}>
          Refresh
        </button>
      </div>
      <LoadError error={webhook.error} />
      {secret ? (
        <div class="secret" role="status">
          <p>
            <strong>Signing secret</strong> (shown only now): <code class="secret-value">{secret}</code> <CopyButton text={secret} label="Copy signing secret" />
          </p>
        </div>
      ) : null}
      {configuration ? (
        <section aria-labelledby="owner-webhook-config">
          <h2 id="owner-webhook-config">Endpoint</h2>
          {configuration.configured ? (
            <p>
              Sends {configuration.eventTypes.join(', ')} to <code>{configuration.url}</code> ·{' '}
              {configuration.enabled ? 'delivering' : configuration.disabledReason === 'failing' ? 'stopped: its endpoint kept failing' : 'paused'}
            </p>
          ) : (
            <p class="muted">No webhook yet: events are still kept and listed below.</p>
          )}
          <form onSubmit={save} class="inline-form">
            <label>
              Webhook URL <input name="url" type="url" required defaultValue={configuration.url} autocomplete="off" />
            </label>
            <button type="submit" disabled={action.busy}>
              Save webhook
            </button>
          </form>
          <Outcome action={action} />
        </section>
      ) : null}
      {webhook.data ? (
        <>
          <section aria-labelledby="owner-events">
            <h2 id="owner-events">Events</h2>
            {webhook.data.events.length === 0 ? (
              <p class="muted">No events in the last 30 days.</p>
            ) : (
              <table>
                <thead>
                  <tr>
                    <th scope="col">When</th>
                    <th scope="col">Event</th>
                    <th scope="col">Id</th>
                  </tr>
                </thead>
                <tbody>
                  {webhook.data.events.map((event) => (
                    <tr>
                      <td>
                        <When s={event.createdAt} />
                      </td>
                      <td>{event.type}</td>
                      <td>
                        <code>{event.id}</code>
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            )}
          </section>
          <section aria-labelledby="owner-deliveries">
            <h2 id="owner-deliveries">Deliveries</h2>
            <Deliveries
              deliveries={webhook.data.deliveries}
              attempts={async (deliveryId) => ok(await api.GET('/v1/owner/webhook/deliveries/{deliveryId}/attempts', { params: { path: { deliveryId } } }))}
            />
          </section>
        </>
      ) : null}
    </>
  );
}
