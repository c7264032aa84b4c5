// A rotation run with another ACG_SECRET_BOX_KEY than the instances' (found from outside, 2026-12-07): on a live
// database with no sealed key yet it was accepted; afterwards running instances warned with a stack every 5 s, every
// restart failed (exit 1, nothing on stderr), the instances' own box key was refused, and no command undid it.
// These run the real `acg` processes, on the embedded database and on PostgreSQL.
import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { databaseNowMs } from '../../src/platform/clock.ts';
import { loadConfig } from '../../src/platform/config.ts';
import { openDatabase } from '../../src/platform/db/open.ts';
import { generateSecretBoxKey, sealSecret, type SecretBoxKey } from '../../src/platform/secret-box.ts';
import { generateSigningKey, KEY_RELOAD_INTERVAL_S } from '../../src/platform/signing.ts';
import { createPostgresDatabase, onPostgres } from '../support/database.ts';
import { spawnGateway } from '../support/process.ts';
import { waitFor } from '../support/wait.ts';

const run = promisify(execFile);
const ACG = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../bin/acg.js');

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `acg …` to its end: its exit code and output, whether it succeeded or not. */
async function acg(env: Record<string, string>, ...args: string[]): Promise<Outcome> {
  try {
    const { stdout, stderr } = await run(process.execPath, [ACG, ...args], { env: { ...process.env, LOG_LEVEL: 'silent', ...env } });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const { code, stdout, stderr } = error as Outcome;
    return { code, stdout, stderr };
  }
}

/**
 * A live gateway's settings on a database of its own (a data directory, or a new PostgreSQL database), signing with
 * ACG_SIGNING_KEY and running with a box key of its own.
 */
async function withLiveDatabase(use: (live: Record<string, string>) => Promise<void>): Promise<void> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'acg-unopened-'));
  const database = onPostgres() ? await createPostgresDatabase() : undefined;
  const own = generateSecretBoxKey();
  // A base URL nothing answers at (a port just freed), so that `acg credit grant` falls back to the database.
  const nowhere = await new Promise<number>((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
  const live = {
    ACG_DATA_DIR: dataDir,
    DATABASE_URL: database?.url ?? '',
    ACG_MODE: 'live',
    ACG_BASE_URL: `http://127.0.0.1:${nowhere}`,
    ACG_SECRET_BOX_KEY: own.text,
    ACG_SIGNING_KEY: generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
  try {
    await use(live);
  } finally {
    await database?.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/**
 * Adds a signing key sealed with `box`, active from now by the database's clock, as a rotation with that box key wrote
 * it (before rotations checked the box key). On the embedded database no gateway may run meanwhile.
 */
async function insertSealedKey(live: Record<string, string>, box: SecretBoxKey): Promise<string> {
  const key = await generateSigningKey();
  const db = await openDatabase(loadConfig({ ACG_DATA_DIR: live.ACG_DATA_DIR, DATABASE_URL: live.DATABASE_URL }));
  try {
    const nowS = Math.floor((await databaseNowMs(db)) / 1000);
    await db.query('INSERT INTO signing_keys (kid, alg, public_jwk, private_jwk, created_at_s, active_from_s) VALUES ($1, $2, $3, $4, $5, $5)', [
      key.kid,
      'ES256',
      JSON.stringify(key.publicJwk),
      sealSecret(box, JSON.stringify(key.privateJwk), `signing_key:${key.kid}`),
      nowS,
    ]);
  } finally {
    await db.close();
  }
  return key.kid;
}

const jwksKids = async (url: string): Promise<string[]> => ((await (await fetch(`${url}/.well-known/jwks.json`)).json()) as { keys: Array<{ kid: string }> }).keys.map((key) => key.kid);

describe('the box key of a live rotation', () => {
  it("is refused when it is not the instances' own, though no key is sealed yet: the instances keep a check of theirs; their own seals (found from outside)", async () => {
    await withLiveDatabase(async (live) => {
      const gateway = await spawnGateway(live);
      try {
        // On the embedded database the command needs the gateway stopped; on PostgreSQL the instance runs on.
        if (!onPostgres()) await gateway.kill();
        const mistyped = await acg({ ...live, ACG_SECRET_BOX_KEY: generateSecretBoxKey().text }, 'keys', 'rotate');
        expect(mistyped.code).toBe(2);
        // Refused before it says it generates anything, in one line.
        expect(mistyped.stdout).toBe('');
        expect(mistyped.stderr).toMatch(/^ACG_SECRET_BOX_KEY here is not the one the gateway's instances run with: it does not open the check they keep in the database \(last seen [^\n]+\), so a key sealed with it would open on any of them\. Set ACG_SECRET_BOX_KEY to the one the gateway runs with, and run this again\n$/);
        const own = await acg(live, 'keys', 'rotate', '--lead-s', '0', '--retention-s', '600');
        expect(own.code, own.stderr).toBe(0);
        const kid = /published (\S+); it signs from \S+ \(now\)/.exec(own.stdout)![1]!;
        if (onPostgres()) {
          // The running instance opens it and signs with it within one key reload.
          await waitFor(() => jwksKids(gateway.url), { what: 'the rotated key in the JWKS', until: (kids) => kids.includes(kid), timeoutMs: 4 * KEY_RELOAD_INTERVAL_S * 1000 });
          expect(gateway.logs.filter((line) => String(line.msg).includes('does not open'))).toEqual([]);
        }
      } finally {
        await gateway.kill();
      }
    });
  }, 120_000);
});

describe('a key no instance can open (a rotation with a mistaken box key left it)', () => {
  it('stops no instance that signs with another key, and is said once, without a stack; an instance with no other key refuses to start in one line (exit 2); acg keys withdraw removes it', async () => {
    await withLiveDatabase(async (live) => {
      // A first run records the instances' box key.
      await (await spawnGateway(live)).kill();
      const stray = await insertSealedKey(live, generateSecretBoxKey().key);

      // ACG_SIGNING_KEY signs: the instance starts, leaves the key out, and says so once, also across its key reloads.
      const gateway = await spawnGateway(live);
      try {
        await new Promise((resolve) => setTimeout(resolve, 2 * KEY_RELOAD_INTERVAL_S * 1000 + 500));
        const said = gateway.logs.filter((line) => JSON.stringify(line).includes(stray));
        expect(said).toHaveLength(1);
        expect(said[0]).toMatchObject({ level: 40, kids: [stray], msg: expect.stringContaining(`\`acg keys withdraw ${stray}\` removes the key`) });
        expect(said[0]!.err).toBeUndefined();
        expect(gateway.logs.filter((line) => (line.level as number) >= 50)).toEqual([]);
        expect(await jwksKids(gateway.url)).not.toContain(stray);
      } finally {
        await gateway.kill();
      }

      // Nothing else can sign: refused at start, one line on stderr, exit 2, no stack.
      const { ACG_SIGNING_KEY: _signingKey, ...unsigned } = live;
      const refused = await acg({ ...unsigned, PORT: '0', LOG_LEVEL: 'info' }, 'serve');
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(new RegExp(`^acg serve: no signing key this instance can use: the key ${stray}, which would sign, does not open with this instance's ACG_SECRET_BOX_KEY, and no other key signs now or later\\. [^\\n]+\\n$`));
      expect(refused.stdout).not.toMatch(/\n\s+at /);

      // acg credit grant's database fallback opens the keys too: a key it cannot open (it has no box key) does not stop it.
      const { ACG_SECRET_BOX_KEY: _box, ...noBox } = unsigned;
      const grant = await acg(noBox, 'credit', 'grant', '--agent', 'agt_aaaaaaaaaaaaaaaaaaaaaaaaaa', '--amount-uc', '5000000');
      expect(grant).toMatchObject({ code: 2, stderr: expect.stringMatching(/^refused: /) });
      expect(grant.stderr).not.toContain(stray);

      // The way out: withdraw it with the instances' box key; then an instance starts (and answers 503 until a key is rotated in).
      const withdrawn = await acg(unsigned, 'keys', 'withdraw', stray);
      expect(withdrawn.code, withdrawn.stderr).toBe(0);
      expect(withdrawn.stdout).toContain(`withdrew ${stray}: it does not open with the instances' ACG_SECRET_BOX_KEY, so no instance signed with it\n`);
      expect(withdrawn.stderr).toContain('warning: no key in the database signs now');
      await (await spawnGateway(unsigned)).kill();
    });
  }, 150_000);
});
