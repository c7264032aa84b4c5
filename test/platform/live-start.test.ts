// Live mode generates nothing, so each setting left out costs whole families of routes: the gateway says which at
// start-up, one warning each (src/app.ts, missingLivePieces), and a dev gateway says nothing.
import pino from 'pino';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { startTestGateway } from '../support/gateway.ts';

function capturedLog(): { log: pino.Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  return { log: pino({ level: 'warn' }, sink), lines };
}

describe('live mode says at start-up what it runs without (found from outside)', () => {
  it('one warning per missing setting, naming it and what it costs; none in dev mode', async () => {
    const { log, lines } = capturedLog();
    const live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com' }, log });
    try {
      const said = lines.filter((line) => typeof line.setting === 'string').map((line) => line.setting);
      // Where the ledger is kept and how credit comes in are said too (found from outside, 2026-12-07): the embedded
      // database only where the gateway runs on it, and the payment provider, none in live mode unless set.
      expect(said).toEqual([
        'ACG_SIGNING_KEY', 'ACG_HUMAN_ISSUER', 'ACG_AGENT_ISSUER', 'ACG_API_KEY_PEPPER', 'ACG_SECRET_BOX_KEY', 'ACG_METRICS_TOKEN_SHA256', 'ACG_OPERATOR_TOKEN_SHA256',
        ...(live.gateway.db.kind === 'pglite' ? ['DATABASE_URL'] : []),
        'ACG_PAYMENT_PROVIDER',
      ]);
      if (live.gateway.db.kind === 'pglite') expect(lines.find((line) => line.setting === 'DATABASE_URL')?.msg).toMatch(/^live mode without DATABASE_URL: the ledger is kept in the embedded database in .+; set DATABASE_URL to run on PostgreSQL$/);
      expect(lines.find((line) => line.setting === 'ACG_PAYMENT_PROVIDER')?.msg).toMatch(/^live mode with no payment provider \(ACG_PAYMENT_PROVIDER none or not set\): top-ups answer 503 payment_unavailable/);
      // Every warning of a missing setting names it in `setting` (found from outside: the operator credential's did not).
      expect(lines.filter((line) => String(line.msg).includes('ACG_OPERATOR_TOKEN_SHA256')).every((line) => line.setting === 'ACG_OPERATOR_TOKEN_SHA256')).toBe(true);
      // A setting left out reads "without"; the payment provider, which may also be set to none, says what runs instead.
      for (const line of lines.filter((entry) => entry.setting !== undefined && entry.setting !== 'ACG_PAYMENT_PROVIDER')) expect(line.msg).toMatch(new RegExp(`^live mode without ${String(line.setting)}: .+`));
    } finally {
      await live.close();
    }
    const dev = capturedLog();
    const gateway = await startTestGateway({ log: dev.log });
    try {
      expect(dev.lines.filter((line) => line.setting !== undefined)).toEqual([]);
    } finally {
      await gateway.close();
    }
  });

  it('with DATABASE_URL to a network host not requiring TLS: one warning naming the host and the fix, never the password; none once TLS is required', async () => {
    const url = 'postgres://acg:secret-db-password@db.internal:5432/acg';
    const said = async (databaseUrl: string) => {
      const { log, lines } = capturedLog();
      // The gateway runs on the test's own database: the warning reads the URL, which names the host.
      const live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com', DATABASE_URL: databaseUrl }, log });
      await live.close();
      expect(JSON.stringify(lines)).not.toContain('secret-db-password');
      return lines.filter((line) => line.setting === 'DATABASE_URL' && String(line.msg).includes('TLS')).map((line) => line.msg);
    };
    expect(await said(url)).toEqual([
      'live mode with DATABASE_URL to db.internal not requiring TLS: the ledger\'s statements and answers, and the database password, may cross the network in cleartext ' +
        '(no sslmode connects without TLS; disable, allow and prefer do not require it): add sslmode=verify-full&sslrootcert=<the file of the CA that issued the server\'s certificate> ' +
        '(docs/operations.md, "PostgreSQL over TLS"), or accept it on a network only the gateways and the database share (as deploy/ha does)',
    ]);
    expect(await said(`${url}?sslmode=require`)).toEqual([]);
  });

  it('with ACG_PAYMENT_PROVIDER=local: says that an owner approving a top-up credits it with no payment (found from outside)', async () => {
    const { log, lines } = capturedLog();
    const live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com', ACG_PAYMENT_PROVIDER: 'local' }, log });
    try {
      const said = lines.filter((line) => line.setting === 'ACG_PAYMENT_PROVIDER').map((line) => line.msg);
      expect(said).toEqual([expect.stringMatching(/^live mode with ACG_PAYMENT_PROVIDER=local: an owner's own approval of a top-up credits the agent with no payment taken/)]);
    } finally {
      await live.close();
    }
  });

  it('with ACG_SIGNING_KEY set to a key the database keeps unsealed: says the key is unusable, not missing, and that receipts are left out (found from outside)', async () => {
    const dev = await startTestGateway();
    const { rows } = await dev.gateway.db.query<{ private_jwk: string }>("SELECT private_jwk FROM signing_keys WHERE private_jwk LIKE '{%' LIMIT 1");
    const { log, lines } = capturedLog();
    const live = await startTestGateway({ env: { ACG_MODE: 'live', ACG_BASE_URL: 'https://gateway.example.com', ACG_SIGNING_KEY: rows[0]!.private_jwk }, database: dev.database, log });
    try {
      const signing = lines.find((line) => line.setting === 'ACG_SIGNING_KEY');
      expect(signing?.msg).toMatch(/^live mode with an unusable ACG_SIGNING_KEY: .*keeps unsealed/);
      expect(signing?.msg).toContain('no signed receipt');
    } finally {
      await live.close();
      await dev.close();
    }
  });
});
