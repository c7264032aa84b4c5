// Every number the authorization server enforces, in one place (the spec's Limits table, plus the
// bounds it leaves open). Names carry their units.

/** Registered clients before registration answers 429 (spec: Limits). */
export const CLIENTS_MAX = 1000;
/** At the cap, clients that never obtained a token and are older than this are purged to make room. */
export const UNUSED_CLIENT_PURGE_AFTER_S = 86_400;
/** Registrations (attempts) per client address per rate-limit window (ACG_RATE_LIMIT_WINDOW_S, 60 s). */
export const REGISTRATIONS_PER_ADDRESS_PER_WINDOW = 10;
export const REDIRECT_URIS_MIN = 1;
export const REDIRECT_URIS_MAX = 10;
export const REDIRECT_URI_LENGTH_MAX = 2000;
export const CLIENT_NAME_LENGTH_MAX = 120;

/** How long the person has to choose an identity provider after the client starts authorization. */
export const AUTHORIZATION_REQUEST_LIFETIME_S = 600;
export const STATE_LENGTH_MAX = 512;
/**
 * The longest request id (the pending request, signed: authorization-request.ts) authorize issues and select takes.
 * The longest request the other limits allow (a 2,000-character redirect URI JSON writes twice as long, a 512-character
 * state of three-byte characters) makes about 8,200 characters with a short base URL, and the base URL adds about
 * four characters for each of its own; 12 KiB leaves a base URL of about 1,000, and keeps the consent page's URL under
 * Node's 16 KiB for a request's head. Authorize refuses a longer one, before the person signs in for nothing.
 */
export const REQUEST_ID_CHARS_MAX = 12_288;

/** Spec: a code is single-use and valid one minute. */
export const AUTHORIZATION_CODE_LIFETIME_S = 60;

/** The browser-binding cookie outlives any one request so several can run at once in one browser. */
export const BROWSER_COOKIE_LIFETIME_S = 86_400;

/**
 * A consent is remembered this long (from the click, not sliding): the same client, identity, scope and
 * resource, in the same browser, is re-authorized without the consent page until then.
 */
export const REMEMBERED_CONSENT_LIFETIME_S = 86_400;
/** Remembered consents an owner (with its agents) holds at once; a new one beyond forgets the oldest. */
export const REMEMBERED_CONSENTS_PER_OWNER_MAX = 100;
