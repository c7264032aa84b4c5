// The one idempotency mechanism (Stripe's semantics, IETF draft-ietf-httpapi-idempotency-key-header):
//   first use of a key        → the operation runs; its response is stored in the SAME transaction as
//                               its effect, so an effect without a stored response cannot exist;
// Keys are scoped to (caller, operation name); `src/platform/operations.ts` runs operations through it.
//   same key, same request    → the stored outcome is replayed (HTTP adds `Idempotent-Replayed: true`);
//   same key, other request   → 409 idempotency_key_reused (while the first still runs: idempotency_key_in_use);
//   same key while running    → a single-transaction operation's retry waits on the key's row and
//                               replays; one that works outside the database first (its claim
//                               committed) answers 409 idempotency_key_in_use with Retry-After;
//   business failures (4xx)   → stored and replayed, except one that waits for a human or refuses over the key
//                               itself (operations.ts `leavesKeyFree`); 5xx → not stored, the key may be retried.
// A request that died while running left no effect (its transaction rolled back); after the lease
// ends, a retry of the same request takes the key over. Secrets are removed before storing.
import { hash, randomUUID } from 'node:crypto';
import { ApiError } from './errors.ts';
import { canonicalUc } from './money.ts';
import type { Clock } from './clock.ts';
import type { Database, Queryable } from './db/database.ts';

/** How often a key is offered back after a fault while the database cannot be reached. */
const GIVE_BACK_RETRY_MS = 1_000;

export const IDEMPOTENCY_KEY_PATTERN = /^[A-Za-z0-9._:-]{1,200}$/;
/**
 * Release accepts 1–255 characters (the spec): printable ASCII, spaces inside it too (`release order 42`; found from
 * outside: refused, though the spec and the schema allowed it), as Stripe takes for its 255-character keys. Not a space
 * at either end (HTTP trims them from a header value), nor control or non-ASCII characters, which a header carries
 * only as opaque bytes.
 */
export const RELEASE_KEY_PATTERN = /^[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?$/;
/** The release rule in words, for refusals and the schema's description. */
export const RELEASE_KEY_SHAPE = '1 to 255 printable ASCII characters (spaces inside the key too)';
export const REPLAY_HEADER = 'idempotent-replayed';
/**
 * How an answer that asks for a retry names the key, on every face: a header over HTTP, an argument over MCP (found
 * from outside: an MCP client was told to reuse a header it has no access to).
 */
export const SAME_KEY = 'the same idempotency key (the Idempotency-Key header; over MCP, the idempotencyKey argument)';
/** The same, for an answer that asks for a new request. */
export const NEW_KEY = 'a new idempotency key (the Idempotency-Key header; over MCP, the idempotencyKey argument)';

export type KeyRule = 'default' | 'release';

export interface StoredResponse {
  status: number;
  body: unknown;
  headers: Record<string, string>;
}

export interface Claim {
  scope: string;
  /** The operation name (stored in the `route` column, which once held the HTTP route). */
  route: string;
  key: string;
  token: string;
  /** The claimed request's fingerprint, for operations that claim the same key again later (intent resume). */
  fingerprint?: string;
}

export type ClaimOutcome = { kind: 'owned'; claim: Claim } | { kind: 'replay'; response: StoredResponse };
/** One request's outcome among many claimed at once: a 409 refusal is a value, not thrown. */
export type ClaimManyOutcome = ClaimOutcome | { kind: 'refused'; error: ApiError };

/** A key to claim for one request. */
export interface KeyRequest {
  scope: string;
  route: string;
  key: string;
  fingerprint: string;
}

interface IdempotencyRow {
  fingerprint: string;
  state: 'running' | 'done';
  status_code: number | null;
  response_body: string | null;
  response_headers: string | null;
  locked_until_ms: bigint;
}

/** What an existing record means for a request that could not take it: replay it, or refuse (409). */
function existingOutcome(row: IdempotencyRow | undefined, requestFingerprint: string, nowMs: number): ClaimManyOutcome {
  // The record vanished between the two statements (swept): treat as a conflict the client retries. A running
  // claim, this request's or another's within its lease, is in use: it may yet be given back (a refusal that leaves
  // the key free, a fault), so another request is not told it was the key's first (found from outside: an approved
  // request was told to use a new key while a mistaken one under its key ran, and its client gave the approval up).
  // Past its lease the claim's request died: the key is that request's to take over, and another is refused.
  const live = row !== undefined && row.state === 'running' && (row.fingerprint === requestFingerprint || Number(row.locked_until_ms) > nowMs);
  if (!row || live) {
    const retryAfterS = row ? Math.max(1, Math.ceil((Number(row.locked_until_ms) - nowMs) / 1000)) : 1;
    return {
      kind: 'refused',
      error: new ApiError('idempotency_key_in_use', {
        detail: 'the first request with this idempotency key has not finished; retry after the delay',
        retryAfterS: Math.min(retryAfterS, 5),
      }),
    };
  }
  if (row.fingerprint !== requestFingerprint) {
    return {
      kind: 'refused',
      error: new ApiError('idempotency_key_reused', {
        detail: `this idempotency key was first used with a different request; use ${NEW_KEY} for a new request`,
      }),
    };
  }
  return {
    kind: 'replay',
    response: {
      status: row.status_code ?? 200,
      body: row.response_body === null ? null : JSON.parse(row.response_body),
      headers: row.response_headers === null ? {} : JSON.parse(row.response_headers),
    },
  };
}

/** Checks a key against its rule; undefined when none was sent. */
export function validateIdempotencyKey(key: string | undefined, rule: KeyRule = 'default'): string | undefined {
  if (key === undefined) return undefined;
  const pattern = rule === 'release' ? RELEASE_KEY_PATTERN : IDEMPOTENCY_KEY_PATTERN;
  if (!pattern.test(key)) {
    const shape = rule === 'release' ? `be ${RELEASE_KEY_SHAPE}` : `match ${IDEMPOTENCY_KEY_PATTERN.source}`;
    throw new ApiError('invalid_input', { detail: `Idempotency-Key must ${shape}` });
  }
  return key;
}

/**
 * An amount as the request means it: a member named `…Uc` holds microcredits as a decimal string, which the
 * gateway reads as a number, so `"0100000"` and `"100000"` are one amount and one request (found from outside: a retry
 * that wrote the amount with a leading zero was refused idempotency_key_reused, though nothing differed).
 */
const amountOf = (name: string, value: unknown): unknown => (typeof value === 'string' && name.endsWith('Uc') ? (canonicalUc(value) ?? value) : value);

function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(amountOf(k, v))}`).join(',')}}`;
  }
  return JSON.stringify(typeof value === 'bigint' ? value.toString() : value) ?? 'null';
}

/**
 * The request's identity: the operation name and its canonical input (member order does not matter, nor an amount's
 * leading zeros: `amountOf`). No face appears in it, so the same operation asked over HTTP and over MCP is the same request.
 */
export function fingerprint(operationName: string, input: unknown): string {
  return hash('sha256', `${operationName}\n${canonicalJson(input ?? null)}`, 'hex');
}

export function stringifyBody(body: unknown): string {
  return JSON.stringify(body, (_key, value) => (typeof value === 'bigint' ? value.toString() : value));
}

/**
 * The members of an answer that hold a secret, shown once: the stored answer (what a replay returns) leaves them
 * out and carries `replayNotice` as its `notice`, which says where the secret went: in place of the notice that told
 * the caller to store it, or added to an answer that had none (found from outside: a replayed rotate-secret left the
 * secret out and said nothing). An answer that held no secret keeps its own notice.
 */
export interface SecretMembers {
  fields: readonly string[];
  replayNotice: string;
}

function withoutSecrets(body: unknown, secrets: SecretMembers | undefined): unknown {
  if (!secrets || body === null || typeof body !== 'object' || Array.isArray(body)) return body;
  const copy: Record<string, unknown> = { ...(body as Record<string, unknown>) };
  const held = secrets.fields.filter((field) => field in copy);
  for (const field of held) delete copy[field];
  if (held.length > 0) copy.notice = secrets.replayNotice;
  return copy;
}

export class IdempotencyStore {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly retentionS: number,
    private readonly leaseS: number,
  ) {}

  /**
   * Takes the key for this request, or says why not (replay, or a 409 thrown as ApiError). Given a
   * transaction, the claim commits with it: a concurrent request with the same key waits on the key's
   * row and then replays what this one stored.
   */
  async claim(scope: string, route: string, key: string, requestFingerprint: string, executor: Queryable = this.db): Promise<ClaimOutcome> {
    const [outcome] = await this.claimMany(executor, [{ scope, route, key, fingerprint: requestFingerprint }]);
    if (outcome!.kind === 'refused') throw outcome!.error;
    return outcome!;
  }

  /**
   * Claims many keys in two statements at most (group commit): one outcome per request, in order, a
   * refusal (409) as a value. The requests must name distinct keys.
   */
  async claimMany(executor: Queryable, requests: readonly KeyRequest[]): Promise<ClaimManyOutcome[]> {
    const nowMs = this.clock.nowMs();
    const tokens = requests.map(() => randomUUID());
    // Insert, or take over a record that has expired, or a running one whose owner died (lease over)
    // for the very same request. Anything else stays and is reported below.
    const taken = await executor.query<{ claim_token: string }>(
      `INSERT INTO idempotency_keys
         (scope, route, key, fingerprint, state, claim_token, created_at_ms, locked_until_ms, expires_at_ms)
       SELECT scope, route, key, fingerprint, 'running', token, $6, $7, $8
         FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS r(scope, route, key, fingerprint, token)
       ON CONFLICT (scope, route, key) DO UPDATE SET
         fingerprint = EXCLUDED.fingerprint, state = 'running', claim_token = EXCLUDED.claim_token,
         status_code = NULL, response_body = NULL, response_headers = NULL,
         created_at_ms = EXCLUDED.created_at_ms, locked_until_ms = EXCLUDED.locked_until_ms,
         expires_at_ms = EXCLUDED.expires_at_ms
       WHERE idempotency_keys.expires_at_ms <= $6
          OR (idempotency_keys.state = 'running' AND idempotency_keys.locked_until_ms <= $6
              AND idempotency_keys.fingerprint = EXCLUDED.fingerprint)
       RETURNING claim_token`,
      [
        requests.map((r) => r.scope),
        requests.map((r) => r.route),
        requests.map((r) => r.key),
        requests.map((r) => r.fingerprint),
        tokens,
        nowMs,
        nowMs + this.leaseS * 1000,
        nowMs + this.retentionS * 1000,
      ],
    );
    const owned = new Set(taken.rows.map((row) => row.claim_token));
    const outcomes: Array<ClaimManyOutcome | undefined> = requests.map((r, i) =>
      owned.has(tokens[i]!) ? { kind: 'owned', claim: { scope: r.scope, route: r.route, key: r.key, token: tokens[i]!, fingerprint: r.fingerprint } } : undefined,
    );
    const others = requests.filter((_, i) => outcomes[i] === undefined);
    if (others.length === 0) return outcomes as ClaimManyOutcome[];
    const { rows } = await executor.query<IdempotencyRow & { scope: string; route: string; key: string }>(
      `SELECT k.scope, k.route, k.key, k.fingerprint, k.state, k.status_code, k.response_body, k.response_headers, k.locked_until_ms
         FROM idempotency_keys k JOIN unnest($1::text[], $2::text[], $3::text[]) AS r(scope, route, key)
           ON k.scope = r.scope AND k.route = r.route AND k.key = r.key`,
      [others.map((r) => r.scope), others.map((r) => r.route), others.map((r) => r.key)],
    );
    const found = new Map(rows.map((row) => [`${row.scope}\n${row.route}\n${row.key}`, row]));
    return requests.map((request, i) => outcomes[i] ?? existingOutcome(found.get(`${request.scope}\n${request.route}\n${request.key}`), request.fingerprint, nowMs));
  }

  /**
   * Stores the response. Pass the transaction that carried the operation's effect, so both commit or
   * neither does. Throws (rolling that transaction back) if another request took the key over.
   */
  async complete(executor: Queryable, claim: Claim, response: StoredResponse, secrets?: SecretMembers): Promise<void> {
    await this.completeMany(executor, [{ claim, response, secrets }]);
  }

  /**
   * Stores many responses in one statement (group commit); throws if any claim was lost. Each key is found by one
   * probe of the primary key (a lateral lookup) and updated at the address the probe found, so no plan of it
   * reads the keys' index whole: joined with its keys, the update was planned on a young table as a merge join
   * over the whole primary key, and a connection keeps such a plan as the table grows. The claim token is
   * checked again by the update itself: a key another request took over meanwhile is not written (lost).
   */
  async completeMany(executor: Queryable, completions: ReadonlyArray<{ claim: Claim; response: StoredResponse; secrets?: SecretMembers }>): Promise<void> {
    if (completions.length === 0) return;
    const result = await executor.query(
      `UPDATE idempotency_keys k
          SET state = 'done', status_code = r.status_code, response_body = r.response_body, response_headers = r.response_headers
         FROM (SELECT r.*, found.row_tid
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::text[], $7::text[])
                   AS r(scope, route, key, claim_token, status_code, response_body, response_headers)
                CROSS JOIN LATERAL (
                      SELECT f.ctid AS row_tid FROM idempotency_keys f
                       WHERE f.scope = r.scope AND f.route = r.route AND f.key = r.key AND f.claim_token = r.claim_token
                       LIMIT 1) found) r
        WHERE k.ctid = r.row_tid AND k.claim_token = r.claim_token`,
      [
        completions.map((c) => c.claim.scope),
        completions.map((c) => c.claim.route),
        completions.map((c) => c.claim.key),
        completions.map((c) => c.claim.token),
        completions.map((c) => c.response.status),
        completions.map((c) => stringifyBody(withoutSecrets(c.response.body, c.secrets))),
        completions.map((c) => JSON.stringify(c.response.headers)),
      ],
    );
    if (result.rowCount !== completions.length) {
      throw new Error('idempotency claim was lost (lease expired and another request took the key over)');
    }
  }

  /** The stored response of a finished request, while its record is retained. */
  async storedResponse(scope: string, route: string, key: string): Promise<StoredResponse | undefined> {
    const { rows } = await this.db.query<IdempotencyRow>(
      `SELECT fingerprint, state, status_code, response_body, response_headers, locked_until_ms
         FROM idempotency_keys WHERE scope = $1 AND route = $2 AND key = $3 AND state = 'done' AND expires_at_ms > $4`,
      [scope, route, key, this.clock.nowMs()],
    );
    const row = rows[0];
    if (!row) return undefined;
    return {
      status: row.status_code ?? 200,
      body: row.response_body === null ? null : JSON.parse(row.response_body),
      headers: row.response_headers === null ? {} : JSON.parse(row.response_headers),
    };
  }

  /**
   * Ends the lease of a claim whose request died (another instance's process, found by recovery): the key stays its
   * request's, whose retry takes it over at once, as after any lease; another request under it is refused as reused.
   * Deleting it instead let whichever request came next take the key (found from outside: after a kill -9 mid-execute,
   * a different request under the key ran and was charged, and the original's retry was told the key was reused).
   */
  async endLease(claim: Claim): Promise<void> {
    await this.db.query(
      `UPDATE idempotency_keys SET locked_until_ms = 0
        WHERE scope = $1 AND route = $2 AND key = $3 AND claim_token = $4 AND state = 'running'`,
      [claim.scope, claim.route, claim.key, claim.token],
    );
  }

  /** Gives the key back after a failure that must not be replayed (5xx): the client may retry it. */
  async abandon(claim: Claim): Promise<void> {
    await this.abandonMany(this.db, [claim]);
  }

  /**
   * Gives a key back after a fault: now, or, when the database cannot be reached (a failover, an outage), once a
   * second until it can or the lease would have freed it anyway. Before, a failed give-back left the key running for
   * the whole lease: a retry the 503 sent back after a second met 409 idempotency_key_in_use for a minute (found from
   * outside: 54 answers over 56 s after a switchover). Never throws.
   */
  giveBack(claim: Claim): Promise<void> {
    const untilMs = this.clock.nowMs() + this.leaseS * 1000;
    const attempt = (): Promise<void> =>
      this.abandon(claim).catch(() => {
        if (this.clock.nowMs() + GIVE_BACK_RETRY_MS >= untilMs) return;
        setTimeout(() => void attempt(), GIVE_BACK_RETRY_MS).unref();
      });
    return attempt();
  }

  /**
   * Gives keys back in the caller's transaction (one statement): the same requests may run again. A key whose answer
   * is stored stays: a fault seen after its COMMIT was sent (the answer lost on the way back) does not say the
   * transaction failed, and deleting what it stored would let the retry do the effect a second time.
   */
  async abandonMany(executor: Queryable, claims: readonly Claim[]): Promise<void> {
    if (claims.length === 0) return;
    await executor.query(
      `DELETE FROM idempotency_keys k USING unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS c(scope, route, key, claim_token)
        WHERE k.scope = c.scope AND k.route = c.route AND k.key = c.key AND k.claim_token = c.claim_token AND k.state = 'running'`,
      [claims.map((c) => c.scope), claims.map((c) => c.route), claims.map((c) => c.key), claims.map((c) => c.token)],
    );
  }

  /** Deletes records past their retention; returns how many. */
  async sweep(): Promise<number> {
    const result = await this.db.query('DELETE FROM idempotency_keys WHERE expires_at_ms <= $1', [this.clock.nowMs()]);
    return result.rowCount;
  }
}
