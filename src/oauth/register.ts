// Dynamic client registration (RFC 7591), public clients only. Each rule names the error it raises:
// redirect URI problems are `invalid_redirect_uri`, every other metadata problem `invalid_client_metadata`.
// Unknown members are ignored (RFC 7591 §2) and never echoed back.
import { remove as removeConfusables } from 'confusables';
import type { Gateway } from '../platform/gateway.ts';
import { newId } from '../platform/ids.ts';
import { VISIBLE_CHARACTER } from '../platform/schemas.ts';
import { CONSOLE_CLIENT_ID } from './console-client.ts';
import { invalidClientMetadata, invalidRedirectUri, temporarilyUnavailable } from './errors.ts';
import { CLIENT_NAME_LENGTH_MAX, CLIENTS_MAX, REDIRECT_URI_LENGTH_MAX, REDIRECT_URIS_MAX, REDIRECT_URIS_MIN, UNUSED_CLIENT_PURGE_AFTER_S } from './limits.ts';
import { redirectUriProblem } from './redirect-uris.ts';
import { parseScope } from './scopes.ts';
import * as store from './store.ts';

export interface ClientMetadata {
  redirectUris: string[];
  clientName: string | null;
  scope: string | null;
}

export interface ClientRegistration {
  client_id: string;
  client_id_issued_at: number;
  client_name?: string;
  redirect_uris: string[];
  token_endpoint_auth_method: 'none';
  grant_types: ['authorization_code'];
  response_types: ['code'];
  scope?: string;
}

/** Members that only a confidential client would send; a public client must not. */
const CONFIDENTIAL_MEMBERS = ['client_secret', 'client_secret_expires_at', 'jwks', 'jwks_uri'];
const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function exactly(value: unknown, only: string): boolean {
  return Array.isArray(value) && value.length === 1 && value[0] === only;
}

/**
 * The grants a client may list: the authorization code, and beside it the refresh token, which MCP clients ask for
 * (the MCP SDK's own examples register both) and this server does not issue, so the client is registered without
 * it (RFC 7591 §3.2.1: the server may replace a requested value; the answer names what was registered).
 */
const GRANT_TYPES_ACCEPTED: readonly string[] = ['authorization_code', 'refresh_token'];

function grantTypesAccepted(value: unknown): boolean {
  return (
    Array.isArray(value) &&
    value.includes('authorization_code') &&
    value.every((grant) => GRANT_TYPES_ACCEPTED.includes(grant as string)) &&
    new Set(value).size === value.length
  );
}

function redirectUris(value: unknown): string[] {
  if (!Array.isArray(value)) throw invalidRedirectUri('redirect_uris is required: an array of 1 to 10 URIs');
  if (value.length < REDIRECT_URIS_MIN || value.length > REDIRECT_URIS_MAX) {
    throw invalidRedirectUri(`redirect_uris must hold ${REDIRECT_URIS_MIN} to ${REDIRECT_URIS_MAX} URIs, got ${value.length}`);
  }
  const uris = value.map((uri, index) => {
    if (typeof uri !== 'string') throw invalidRedirectUri(`redirect_uris[${index}] must be a string`);
    if (uri.length > REDIRECT_URI_LENGTH_MAX) throw invalidRedirectUri(`redirect_uris[${index}] is longer than ${REDIRECT_URI_LENGTH_MAX} characters`);
    const problem = redirectUriProblem(uri);
    if (problem) throw invalidRedirectUri(`redirect_uris[${index}] ${problem}`);
    return uri;
  });
  // A URI listed twice is registered once, as node-oidc-provider does with every array of client metadata (the
  // answer names what was registered, RFC 7591 §3.2.1): it was stored and echoed twice (found from outside, bb119).
  return [...new Set(uris)];
}

function clientName(value: unknown): string | null {
  if (value === undefined) return null;
  if (typeof value !== 'string') throw invalidClientMetadata('client_name must be a string');
  const length = [...value].length;
  if (length < 1 || length > CLIENT_NAME_LENGTH_MAX) throw invalidClientMetadata(`client_name must be 1 to ${CLIENT_NAME_LENGTH_MAX} characters`);
  // It is shown on the consent page, so it is attacker-controlled text (RFC 7591 §5).
  if (CONTROL_CHARACTERS.test(value)) throw invalidClientMetadata('client_name must not contain control characters');
  // The consent page shows it as who asks for access: a name that shows nothing would read as nobody.
  if (!VISIBLE_CHARACTER.test(value)) throw invalidClientMetadata('client_name must hold a visible character, not only white space or invisible characters');
  // The consent page names the client as who asks for access: a registered client named after the gateway reads as
  // its own console, and the owner's consent gives an owner token to whoever registered it (found from outside).
  if (namesTheGateway(value)) throw invalidClientMetadata(`client_name must not name the gateway itself ("${GATEWAY_NAME}"): the consent page would read as the gateway's own`);
  return value;
}

/**
 * Letters of other scripts that read as Latin letters of the gateway's name, in lower case, beyond what the
 * confusables package folds (Unicode's confusables, UTS #39 confusables.txt).
 */
const READS_AS_LATIN: ReadonlyMap<string, string> = new Map(
  Object.entries({
    a: 'аαɑꭺ',
    c: 'сᴄⲥꮯ',
    d: 'ԁᑯꓒꭰ',
    e: 'еҽεєꭼ',
    g: 'ɡցԍƍꮐ',
    i: 'іıιɩӏꙇꭵ',
    n: 'νոռηⲛ',
    r: 'гᴦⲅꭱ',
    t: 'тτꭲŧ',
    w: 'ѡԝᴡɯꮃա',
    y: 'уүγɣყυꭹ',
  }).flatMap(([latin, lookalikes]) => [...lookalikes].map((lookalike): [string, string] => [lookalike, latin])),
);

/** Runs of ASCII that read as another ASCII letter, in lower case: `credlt`, `cred1t`, `gatevvay`. */
const ASCII_LOOKALIKES: ReadonlyArray<[RegExp, string]> = [
  [/[l1|]/g, 'i'],
  [/vv/g, 'w'],
  [/rn/g, 'm'],
  [/0/g, 'o'],
];

/**
 * What a name reads as, letters and digits only: compatibility form (`ＡＧＥＮＴ`), invisible characters dropped (a
 * Hangul filler for a space), look-alike letters of other scripts and styles read as the Latin letter they look
 * like (`Аgent` with a Cyrillic А, Lisu capitals, small capitals, regional indicators: the confusables package,
 * then `READS_AS_LATIN`), no accents (`Gatewáy`), one case, and look-alike ASCII read alike (`CREDlT`, `GATEVVAY`):
 * `agentcreditgateway`. UTS #39's skeleton, for the question whether a name reads as the gateway's (found from
 * outside: each of these registered, and its consent page opened with it).
 */
function lettersOf(text: string): string {
  let folded = removeConfusables(text.normalize('NFKC').replace(/\p{Default_Ignorable_Code_Point}/gu, ''))
    .replace(/[\u{1F1E6}-\u{1F1FF}]/gu, (indicator) => String.fromCharCode(0x61 + indicator.codePointAt(0)! - 0x1f1e6))
    .normalize('NFD')
    .replace(/\p{M}/gu, '')
    .toLowerCase()
    .replace(/\p{L}/gu, (letter) => READS_AS_LATIN.get(letter) ?? letter);
  for (const [pattern, latin] of ASCII_LOOKALIKES) folded = folded.replace(pattern, latin);
  return folded.replace(/[^\p{L}\p{N}]/gu, '');
}

/** The gateway's name, reserved: no registered client may call itself by it. */
const GATEWAY_NAME = 'Agent Credit Gateway';
const GATEWAY_NAME_LETTERS = lettersOf(GATEWAY_NAME);

function namesTheGateway(name: string): boolean {
  return lettersOf(name).includes(GATEWAY_NAME_LETTERS);
}

function scope(value: unknown): string | null {
  if (value === undefined) return null;
  const scopes = typeof value === 'string' ? parseScope(value) : undefined;
  if (!scopes) throw invalidClientMetadata('scope may only list svc:agent and svc:owner, separated by one space');
  return [...scopes].sort().join(' ');
}

/** Validates a registration request body; throws the RFC 7591 error for the first rule it breaks. */
export function validateClientMetadata(body: unknown): ClientMetadata {
  if (!isPlainObject(body)) throw invalidClientMetadata('the body must be a JSON object of client metadata');
  const uris = redirectUris(body.redirect_uris);
  const name = clientName(body.client_name);
  if (body.token_endpoint_auth_method !== undefined && body.token_endpoint_auth_method !== 'none') {
    throw invalidClientMetadata('token_endpoint_auth_method must be "none": only public clients can register');
  }
  if (body.grant_types !== undefined && !grantTypesAccepted(body.grant_types)) {
    throw invalidClientMetadata(
      'grant_types must be ["authorization_code"], or that with "refresh_token" (registered without it: this server issues no refresh tokens)',
    );
  }
  if (body.response_types !== undefined && !exactly(body.response_types, 'code')) {
    throw invalidClientMetadata('response_types must be ["code"]');
  }
  const confidential = CONFIDENTIAL_MEMBERS.find((member) => body[member] !== undefined);
  if (confidential) throw invalidClientMetadata(`${confidential} is not accepted: only public clients can register`);
  return { redirectUris: uris, clientName: name, scope: scope(body.scope) };
}

export function registrationRecord(row: store.ClientRow): ClientRegistration {
  return {
    client_id: row.id,
    client_id_issued_at: Number(row.created_at_s),
    ...(row.client_name === null ? {} : { client_name: row.client_name }),
    redirect_uris: row.redirect_uris,
    token_endpoint_auth_method: 'none',
    grant_types: ['authorization_code'],
    response_types: ['code'],
    ...(row.scope === null ? {} : { scope: row.scope }),
  };
}

/**
 * Stores a new client unless the cap is reached. At the cap, clients that never obtained a token for a
 * day are purged first, so abandoned registrations cannot lock everyone out for good.
 */
export async function registerClient(gateway: Gateway, metadata: ClientMetadata): Promise<ClientRegistration> {
  const nowS = gateway.clock.nowS();
  const row = await gateway.db.transaction(async (tx) => {
    await store.lockRegistrations(tx);
    // The console's own client is declared, not registered: it takes none of the registrations (found from outside: 999).
    if ((await store.countClients(tx, CONSOLE_CLIENT_ID)) >= CLIENTS_MAX) {
      await store.purgeUnusedClients(tx, nowS - UNUSED_CLIENT_PURGE_AFTER_S, CONSOLE_CLIENT_ID);
      if ((await store.countClients(tx, CONSOLE_CLIENT_ID)) >= CLIENTS_MAX) return undefined;
    }
    return store.insertClient(tx, { id: newId('cli'), clientName: metadata.clientName, redirectUris: metadata.redirectUris, scope: metadata.scope, nowS });
  });
  if (!row) {
    throw temporarilyUnavailable(
      429,
      `the gateway holds its maximum of ${CLIENTS_MAX} registered clients; a client that never obtained a token is removed a day after it registered, making room: retry later`,
      3600,
    );
  }
  return registrationRecord(row);
}
