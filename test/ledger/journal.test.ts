// The journal's one door (src/ledger/journal.ts): every movement's lines pass one balanced-entry check
// before any SQL, and no other module writes journal entries.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Queryable } from '../../src/platform/db/database.ts';
import { appendJournal, balancedEntries, combined, journalInsert, type BalancedJournal } from '../../src/ledger/journal.ts';

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith('.ts') ? [full] : [];
  });
}

const relative = (file: string) => path.relative(path.resolve('src'), file).split(path.sep).join('/');

/** A database that records what it is asked and answers nothing. */
function recordingDb(): Queryable & { statements: string[] } {
  const statements: string[] = [];
  return { statements, query: async (sql: string) => (statements.push(sql), { rows: [] }) } as unknown as Queryable & { statements: string[] };
}

describe('the journal', () => {
  it('is written only by src/ledger/journal.ts', () => {
    const writers = sourceFiles(path.resolve('src'))
      .filter((file) => /insert\s+into\s+journal_entries/i.test(readFileSync(file, 'utf8')))
      .map(relative);
    expect(writers).toEqual(['ledger/journal.ts']);
  });

  it('is made balanced only by src/ledger/journal.ts (no cast to BalancedJournal elsewhere)', () => {
    const casts = sourceFiles(path.resolve('src'))
      .filter((file) => /as\s+BalancedJournal\b/.test(readFileSync(file, 'utf8')))
      .map(relative);
    expect(casts).toEqual(['ledger/journal.ts']);
  });

  it('refuses an operation that does not sum to zero before any SQL', async () => {
    const db = recordingDb();
    await expect(async () =>
      appendJournal(db, balancedEntries('hold_1', 'hold', [{ account: 'lot:lot_1', amountUc: -5n }, { account: 'hold:hold_1', amountUc: 4n }]), 1_700_000_000),
    ).rejects.toThrow('ledger invariant: journal operation hold_1 sums to -1');
    expect(db.statements).toEqual([]);
  });

  it('refuses a zero line and an operation that moves nothing', () => {
    expect(() => balancedEntries('hold_1:release', 'release', [{ account: 'hold:hold_1', amountUc: 0n }, { account: 'lot:lot_1', amountUc: 0n }])).toThrow(
      'ledger invariant: journal operation hold_1:release has a zero line for hold:hold_1',
    );
    expect(() => balancedEntries('lot_1', 'grant', [])).toThrow('ledger invariant: journal operation lot_1 moves nothing');
  });

  it('writes a balanced operation in one statement, and cannot be changed once checked', async () => {
    const journal = balancedEntries('lot_1', 'grant', [{ account: 'source:grant', amountUc: -7n }, { account: 'lot:lot_1', amountUc: 7n }]);
    expect(Object.isFrozen(journal) && Object.isFrozen(journal.entries)).toBe(true);
    expect(() => (journal.entries as unknown[]).push({ operationId: 'lot_1', kind: 'grant', account: 'lot:lot_1', amountUc: 1n })).toThrow();
    const db = recordingDb();
    await appendJournal(db, journal, 1_700_000_000);
    expect(db.statements).toHaveLength(1);
  });

  it('combines operations into one insert, each keeping its own id and kind', () => {
    const journal = combined([
      balancedEntries('hold_1', 'hold', [{ account: 'lot:lot_1', amountUc: -3n }, { account: 'hold:hold_1', amountUc: 3n }]),
      balancedEntries('hold_2:capture', 'capture', [{ account: 'hold:hold_2', amountUc: -2n }, { account: 'merchant:mer_1', amountUc: 2n }]),
    ]);
    const insert = journalInsert(journal, 1_700_000_000, 15);
    expect(insert.sql).toMatch(/\$15::text\[\], \$16::text\[\], \$17::text\[\], \$18::bigint\[\]/);
    expect(insert.params).toEqual([['hold_1', 'hold_1', 'hold_2:capture', 'hold_2:capture'], ['hold', 'hold', 'capture', 'capture'], ['lot:lot_1', 'hold:hold_1', 'hold:hold_2', 'merchant:mer_1'], ['-3', '3', '-2', '2'], 1_700_000_000]);
  });

  it('takes only a checked journal (a plain object does not compile)', () => {
    const unchecked = { entries: [{ operationId: 'lot_1', kind: 'grant' as const, account: 'lot:lot_1', amountUc: 1n }] };
    // @ts-expect-error an object with the same members is not a BalancedJournal: only balancedEntries makes one.
    const journal: BalancedJournal = unchecked;
    expect(journal.entries).toHaveLength(1);
  });
});
