// The owner webhook: where the events of the owner's agents go (top-ups, intents, purchases waiting for
// approval), the events themselves (kept 30 days, delivered or not) and the deliveries with their attempts and a
// re-send, each list a page at a time, newest first, with its older pages on request.
import { useState } from 'preact/hooks';
import { ok, newKey } from '../api.ts';
import { ConfirmButton, CopyButton, Outcome, PageHead, ShowMore, useAction, useConsole, useLoad, usePages, When, whenText } from '../ui.tsx';
import { Deliveries, DELIVERIES_PAGE } from './merchants.tsx';
import { useLeaveGuard } from '../router.ts';

/** Events shown per page (the API takes up to 100). */
const EVENTS_PAGE = 20;

export function OwnerWebhookPage() {
  const { api } = useConsole();
  const configured = useLoad(async () => ok(await api.GET('/v1/owner/webhook')).configuration, []);
  const events = usePages(async (startingAfter) => {
    const page = ok(await api.GET('/v1/owner/events', { params: { query: { limit: EVENTS_PAGE, startingAfter } } }));
    return { items: page.events, hasMore: page.hasMore };
  }, []);
  const deliveries = usePages(async (startingAfter) => {
    const page = ok(await api.GET('/v1/owner/webhook/deliveries', { params: { query: { limit: DELIVERIES_PAGE, startingAfter } } }));
    return { items: page.deliveries, hasMore: page.hasMore };
  }, []);
  const reload = () => {
    configured.reload();
    events.reload();
    deliveries.reload();
  };
  const [secret, setSecret] = useState<string | undefined>();
  useLeaveGuard(secret ? 'Leave this page? The signing secret is shown only here, now: copy it first, or you will have to rotate it.' : undefined);
  const action = useAction();
  const configuration = configured.data;
  // Every change is a PUT of the whole configuration: a save of the URL keeps the webhook paused or delivering as it
  // is (found from outside: saving the URL of a paused webhook resumed it, as PUT's `enabled` defaults to true).
  const put = (body: { url: string; enabled: boolean }, said: (notice: string) => string = (notice) => notice) =>
    action.run(async () => {
      const answer = ok(await api.PUT('/v1/owner/webhook', { params: { header: { 'Idempotency-Key': newKey() } }, body }));
      setSecret(answer.webhookSecret);
      reload();
      return said(answer.notice);
    });
  // A rotation keeps the old secret signing beside the new one for the route's default overlap (found from outside:
  // the console replaced the secret at once, so a receiver not yet switched failed every delivery).
  const rotate = () =>
    action.run(async () => {
      const answer = ok(await api.POST('/v1/owner/webhook/rotate-secret', { params: { header: { 'Idempotency-Key': newKey() } }, body: {} }));
      setSecret(answer.webhookSecret);
      reload();
      const until = answer.configuration.configured ? answer.configuration.previousSecretExpiresAt : undefined;
      return until ? `New secret issued: the old one keeps signing beside it until ${whenText(until)}.` : 'New secret issued.';
    });
  const enabledNow = configuration?.configured === true ? configuration.enabled : true;
  const save = (event: Event) => {
    event.preventDefault();
    const fields = new FormData(event.currentTarget as HTMLFormElement);
    void put({ url: String(fields.get('url') ?? '').trim(), enabled: enabledNow });
  };
  // Any listed event can be sent (again) to an enabled webhook: those of a pause, or of before it existed, have no
  // delivery to re-send (found from outside: the page offered no way to send them).
  const sendable = configuration?.configured === true && configuration.enabled;
  const sending = useAction();
  const send = (eventId: string) =>
    sending.run(async () => {
      ok(await api.POST('/v1/owner/events/{eventId}/resend', { params: { path: { eventId }, header: { 'Idempotency-Key': newKey() } } }));
      deliveries.reload();
      return `Queued to be sent: ${eventId} (see its delivery below).`;
    });
  return (
    <>
      <PageHead title="Owner webhook" loads={[configured, events, deliveries]} onRefresh={reload} />
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
          {configuration.configured ? (
            <p class="inline-actions">
              <button type="button" disabled={action.busy} onClick={() => void put({ url: configuration.url, enabled: !configuration.enabled }, () => (configuration.enabled ? 'Paused: events are kept, and none is delivered until you resume.' : 'Resumed: new events are delivered.'))}>
                {configuration.enabled ? 'Pause deliveries' : 'Resume deliveries'}
              </button>{' '}
              <ConfirmButton
                label="Rotate signing secret"
                title="Rotate the signing secret?"
                consequence="A new secret is issued and shown here once. For 24 hours every delivery is signed with both, so your receiver keeps verifying while you give it the new one; then only the new one signs."
                confirmLabel="Rotate the secret"
                disabled={action.busy}
                onConfirm={() => void rotate()}
              />
            </p>
          ) : null}
          <Outcome action={action} />
        </section>
      ) : null}
      {events.data ? (
        <section aria-labelledby="owner-events">
          <h2 id="owner-events">Events</h2>
          {events.data.items.length === 0 ? (
            <p class="muted">No events in the last 30 days.</p>
          ) : (
            <>
              <div class="table-scroll">
                <table>
                  <thead>
                    <tr>
                      <th scope="col">When</th>
                      <th scope="col">Event</th>
                      <th scope="col">Id</th>
                      {sendable ? <th scope="col">Webhook</th> : null}
                    </tr>
                  </thead>
                  <tbody>
                    {events.data.items.map((event) => (
                      <tr>
                        <td>
                          <When s={event.createdAt} />
                        </td>
                        <td>{event.type}</td>
                        <td>
                          <code>{event.id}</code>
                        </td>
                        {sendable ? (
                          <td>
                            <button type="button" disabled={sending.busy} aria-label={`Send ${event.type} ${event.id} to the webhook`} onClick={() => void send(event.id)}>
                              Send
                            </button>
                          </td>
                        ) : null}
                      </tr>
                    ))}
                  </tbody>
                </table>
              </div>
              <Outcome action={sending} />
              <ShowMore list={events} label={`Show ${EVENTS_PAGE} older events`} end={`All ${events.data.items.length} events of the last 30 days are shown.`} />
            </>
          )}
        </section>
      ) : null}
      {deliveries.data ? (
        <section aria-labelledby="owner-deliveries">
          <h2 id="owner-deliveries">Deliveries</h2>
          <Deliveries
            list={deliveries}
            attempts={async (deliveryId) => ok(await api.GET('/v1/owner/webhook/deliveries/{deliveryId}/attempts', { params: { path: { deliveryId } } }))}
            // Only to a webhook that delivers: a paused one refuses a re-send (409), so the page offers none.
            resend={
              sendable
                ? async (deliveryId) => {
                    ok(await api.POST('/v1/owner/webhook/deliveries/{deliveryId}/resend', { params: { path: { deliveryId }, header: { 'Idempotency-Key': newKey() } } }));
                    reload();
                  }
                : undefined
            }
          />
        </section>
      ) : null}
    </>
  );
}
