// `acg keys list`, `acg keys rotate` and `acg keys withdraw`: the operator's view of the gateway's ES256 signing keys,
// the one safe way to replace the signing key, and the way to take back a key that never signed. A rotation publishes
// the next key before it signs (every instance reloads keys every KEY_RELOAD_INTERVAL_S; verifiers cache our JWKS for
// 300 s) and keeps the replaced key published, so it still verifies, until every token it signed has expired. Every
// time here is the database's (`databaseNowMs`): instances compare the keys' times with theirs, and the host running
// the command may be another, whose clock may differ (found from outside).
import { databaseNowMs } from '../platform/clock.ts';
import type { Config } from '../platform/config.ts';
import type { Database } from '../platform/db/database.ts';
import { LedgerService } from '../ledger/service.ts';
import { OfferService } from '../offers/service.ts';
import { configuredSecretBoxKey } from '../platform/secret-box.ts';
import { schemaRefusal, schemaState, type SchemaState } from '../platform/db/migrate.ts';
import { embeddedDatabaseDir, openDatabase } from '../platform/db/open.ts';
import { cannotOpenDatabase } from '../platform/db/faults.ts';
import { existsSync } from 'node:fs';
import {
  configuredKid,
  listSigningKeys,
  PUBLICATION_LEAD_S_DEFAULT,
  RETIRED_KEY_RETENTION_S_DEFAULT,
  KEY_RELOAD_INTERVAL_S,
  checkRotation,
  rotateSigningKeys,
  SigningKeyRefusal,
  withdrawSigningKey,
  type SigningKeySummary,
  type WithdrawalReason,
} from '../platform/signing.ts';

/** The key reload interval of every instance plus the JWKS max-age we send: below this a verifier may not know the key yet. */
const LEAD_S_SAFE_MIN = KEY_RELOAD_INTERVAL_S + 300;
/** Access tokens live 600 s: a shorter retention would reject tokens that are still valid. */
const RETENTION_S_MIN = 600;

function fail(message: string): never {
  process.stderr.write(`${message}\n`);
  process.exit(2);
}

function seconds(name: string, raw: string, min: number, max: number): number {
  const value = Number(raw);
  if (!/^[0-9]+$/.test(raw) || value < min || value > max) fail(`${name} must be a whole number of seconds between ${min} and ${max}`);
  return value;
}

function when(atS: number | null, nowS: number): string {
  if (atS === null) return '-';
  const delta = atS - nowS;
  const relative = delta === 0 ? 'now' : delta > 0 ? `in ${delta} s` : `${-delta} s ago`;
  return `${new Date(atS * 1000).toISOString()} (${relative})`;
}

async function withDatabase<T>(config: Config, fn: (db: Database) => Promise<T>): Promise<T> {
  // A mistyped ACG_DATA_DIR, or another directory, would otherwise get a new database of its own, whose keys no gateway reads.
  if (!config.databaseUrl && !existsSync(embeddedDatabaseDir(config.dataDir))) {
    fail(`there is no database in ${config.dataDir}: run this in the gateway's directory, or set ACG_DATA_DIR to its data directory (DATABASE_URL to its database on PostgreSQL)`);
  }
  let db: Database;
  let schema: SchemaState;
  try {
    db = await openDatabase(config);
    schema = await schemaState(db);
  } catch (error) {
    // A gateway holding the embedded database is said by the error itself (stop it first); any other failure (a
    // directory of another user's, say) is not blamed on one (found from outside: the hint was given for both).
    fail(cannotOpenDatabase(error));
  }
  // The keys need this release's schema, and a key command never migrates: run from a newer checkout, it would have
  // upgraded the schema under a running fleet, whose older instances then stop (found from outside: keys list did).
  if (schema.state === 'current') {
    try {
      return await fn(db);
    } finally {
      await db.close();
    }
  }
  await db.close();
  fail(schemaRefusal(schema)!);
}

/** Now by the database's clock, in seconds. */
const databaseNowS = async (db: Database): Promise<number> => Math.floor((await databaseNowMs(db)) / 1000);

/** A key command's refusal (exit 2), once withDatabase has closed the database, as every other refusal of the command. */
const refused = (error: unknown): never | Promise<never> => (error instanceof SigningKeyRefusal ? fail(error.message) : Promise.reject(error));

function printKeys(keys: SigningKeySummary[], nowS: number): void {
  for (const key of keys) {
    // Live mode leaves such a key out (platform/signing.ts): whoever read the database could sign with it.
    if (key.state === 'ignored') {
      process.stdout.write(`${key.kid}  ${key.state.padEnd(8)}  unsealed: live mode does not use it (acg keys withdraw ${key.kid} removes it)\n`);
      continue;
    }
    // A key sealed with another box key than this shell's: the one to withdraw after a rotation with a mistaken box key.
    const opens = key.opens === false ? '  sealed with another box key than ACG_SECRET_BOX_KEY here' : '';
    process.stdout.write(
      `${key.kid}  ${key.state.padEnd(8)}  signs from ${when(key.activeFromS, nowS)}  until ${when(key.retiredAtS, nowS)}  published until ${when(key.publishedUntilS, nowS)}${opens}\n`,
    );
  }
}

export async function listKeys(config: Config): Promise<void> {
  const { keys, nowS } = await withDatabase(config, async (db) => {
    const nowS = await databaseNowS(db);
    return { keys: await listSigningKeys(db, nowS, config.mode, configuredSecretBoxKey(config)), nowS };
  });
  if (config.signingKey) {
    const kid = await configuredKid(config.signingKey);
    // Live mode leaves out a configured key the table keeps unsealed (SigningKeys.reload): say so, not that it signs.
    const exposed = keys.some((key) => key.kid === kid && key.state === 'ignored');
    process.stdout.write(
      exposed
        ? `ACG_SIGNING_KEY is set, but it is ${kid}, which the database keeps unsealed: live mode does not sign with it; set a new key\n`
        : 'ACG_SIGNING_KEY is set: that key signs until a key below becomes active, and stays published while it is set\n',
    );
  }
  if (keys.length === 0) process.stdout.write('no keys in the database\n');
  printKeys(keys, nowS);
}

export async function rotateKeys(config: Config, options: { leadS: string; retentionS: string; expireNow?: boolean; uncheckedBoxKey?: boolean }): Promise<void> {
  // A leaked key: nothing it signed may verify any longer, whatever that breaks (Stripe's "roll key, expire now").
  const leadS = options.expireNow ? 0 : seconds('--lead-s', options.leadS, 0, 7 * 86_400);
  const retentionS = options.expireNow ? 0 : seconds('--retention-s', options.retentionS, RETENTION_S_MIN, 366 * 86_400);
  if (options.expireNow) {
    process.stderr.write(
      `warning: --expire-now: within ${KEY_RELOAD_INTERVAL_S} s (each instance reloads its keys) nothing the replaced keys signed verifies: access tokens ` +
        '(clients get new ones), vouchers of open holds (capture them by id) and receipts already issued\n',
    );
  } else if (leadS < LEAD_S_SAFE_MIN) {
    process.stderr.write(`warning: --lead-s ${leadS} is shorter than ${LEAD_S_SAFE_MIN} s; verifiers that cached the JWKS may reject new tokens until they refetch it\n`);
  }
  // A key kept in the database in clear would let whoever copies the database sign as the gateway.
  const sealWith = configuredSecretBoxKey(config);
  if (!sealWith && config.mode === 'live') {
    fail('live mode seals a rotated key with ACG_SECRET_BOX_KEY (base64 of 32 random bytes, the one the gateway runs with): set it and rotate again');
  }
  const { report, outlasting, longestHoldS, nowS } = await withDatabase(config, async (db) => {
    const nowS = await databaseNowS(db);
    const rotation = { nowS, leadS, retentionS, sealWith, uncheckedBoxKey: options.uncheckedBoxKey, mode: config.mode };
    // A refusal before the work is said (found from outside: a refused box key was first told "generating a new key").
    await checkRotation(db, rotation);
    // Said once the database is open: on PGlite a running gateway refuses the command before anything is made.
    process.stdout.write(`generating a new ES256 key${sealWith ? ', sealed with ACG_SECRET_BOX_KEY' : ' (dev mode: kept unsealed, as the dev key is)'}…\n`);
    return {
      report: await rotateSigningKeys(db, rotation),
      outlasting: await LedgerService.heldPast(db, nowS + leadS + retentionS),
      longestHoldS: await OfferService.longestHoldLifetimeS(db),
      nowS,
    };
  }).catch(refused);
  if (outlasting.count > 0 && !options.expireNow) {
    // Their vouchers were signed by the key this replaces (found from outside: they stopped verifying offline, silently).
    process.stderr.write(
      `warning: ${outlasting.count} open hold(s) outlast the replaced key (the latest until ${when(outlasting.latestS!, nowS)}): their vouchers stop verifying ` +
        `offline once it leaves the JWKS (capture by id still works); --retention-s ${outlasting.latestS! - nowS - leadS} would cover them\n`,
    );
  }
  if (leadS > 0 && longestHoldS !== null && longestHoldS > retentionS && !options.expireNow) {
    // The replaced key signs until the new one takes over: a hold taken at the end of the lead lives its offer's hold
    // lifetime from there, past the retention (noticed in an earlier session: the warning counted only the holds open now).
    process.stderr.write(
      `warning: the replaced key still signs for ${leadS} s; a voucher it signs then may live ${longestHoldS} s (the longest hold of an active offer), ` +
        `past its retention of ${retentionS} s, and stop verifying offline before its hold ends; --retention-s ${longestHoldS} would cover them\n`,
    );
  }
  for (const kid of report.removedKids) process.stdout.write(`removed ${kid}: past its publication window\n`);
  for (const kid of report.withdrawnKids) process.stdout.write(`withdrew ${kid}: an earlier rotation's key, still upcoming, which signed nothing; this one replaces it\n`);
  process.stdout.write(`published ${report.next.kid}; it signs from ${when(report.next.activeFromS, nowS)}\n`);
  for (const key of report.replaced) {
    if (key.state === 'ignored') {
      process.stdout.write(`${key.kid} is unsealed: live mode does not use it (acg keys withdraw ${key.kid} removes it)\n`);
      continue;
    }
    const stops = key.retiredAtS !== null && key.retiredAtS < nowS ? 'stopped signing' : 'stops signing';
    process.stdout.write(`${key.kid} ${stops} ${when(key.retiredAtS, nowS)} and verifies until ${when(key.publishedUntilS, nowS)}\n`);
  }
  if (!options.expireNow && report.replaced.some((key) => key.state !== 'ignored')) {
    // Receipts have no exp, and outlive the retention (found from outside: the command spoke of vouchers only).
    process.stdout.write(
      'receipts a replaced key signed verify against the JWKS until then too; after that, a hold\'s evidence (GET /v1/redemptions/{id}/evidence, signed anew at each read) carries them\n',
    );
  }
  if (config.signingKey && options.expireNow) {
    process.stdout.write('ACG_SIGNING_KEY is set and is not in the database: if it is the leaked key, remove it from every instance\'s environment and restart them\n');
  } else if (config.signingKey) {
    process.stdout.write(
      `ACG_SIGNING_KEY is set: the new key takes over from it ${when(report.next.activeFromS, nowS)}; remove ACG_SIGNING_KEY after ${when(report.next.activeFromS + retentionS, nowS)} so it leaves the JWKS\n`,
    );
  }
  process.stdout.write(`running instances pick this up within ${KEY_RELOAD_INTERVAL_S} s (key reload); defaults: --lead-s ${PUBLICATION_LEAD_S_DEFAULT}, --retention-s ${RETIRED_KEY_RETENTION_S_DEFAULT}\n`);
}

const WITHDRAWN_BECAUSE: Record<WithdrawalReason, string> = {
  upcoming: 'it was still upcoming, and signed nothing',
  unopened: "it does not open with the instances' ACG_SECRET_BOX_KEY, so no instance signed with it",
  ignored: 'it was kept unsealed, which live mode never uses',
};

export async function withdrawKey(config: Config, kid: string, options: { uncheckedBoxKey?: boolean }): Promise<void> {
  // ACG_SIGNING_KEY is not in the database: it leaves with the environment, which is said rather than "no such key".
  if (config.signingKey && (await configuredKid(config.signingKey)) === kid) {
    fail(`${kid} is ACG_SIGNING_KEY, which is not in the database: remove it from every instance's environment and restart them (after a rotation has replaced it)`);
  }
  const { report, nowS } = await withDatabase(config, async (db) => {
    const nowS = await databaseNowS(db);
    return { report: await withdrawSigningKey(db, kid, { nowS, box: configuredSecretBoxKey(config), uncheckedBoxKey: options.uncheckedBoxKey, mode: config.mode }), nowS };
  }).catch(refused);
  process.stdout.write(`withdrew ${kid}: ${WITHDRAWN_BECAUSE[report.reason]}\n`);
  for (const key of report.restored) {
    process.stdout.write(`${key.kid} goes on signing${key.retiredAtS === null ? '' : ` until ${when(key.retiredAtS, nowS)}`}: ${kid} was to replace it\n`);
  }
  const signing = report.left.find((key) => key.state === 'signing');
  if (signing) process.stdout.write(`${signing.kid} signs now\n`);
  else if (config.signingKey) process.stdout.write('no key in the database signs now: ACG_SIGNING_KEY signs\n');
  else {
    process.stderr.write(
      `warning: no key in the database signs now${report.left.some((key) => key.state === 'upcoming') ? ' (one is upcoming)' : ''}: run acg keys rotate with the instances' ACG_SECRET_BOX_KEY, or give them ACG_SIGNING_KEY\n`,
    );
  }
  process.stdout.write(`running instances pick this up within ${KEY_RELOAD_INTERVAL_S} s (key reload)\n`);
}
