// The polling helper every test waits with: it returns what it awaited, and a wait that times out fails
// loudly, naming what it waited for, for how long, and what the probe last saw or threw.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { describe, expect, it } from 'vitest';
import { waitFor } from './wait.ts';

describe('waitFor', () => {
  it('returns the first truthy value of the probe, polling until there is one', async () => {
    let calls = 0;
    const value = await waitFor(() => (++calls >= 3 ? { calls } : undefined), { what: 'the third call', intervalMs: 1 });
    expect(value).toEqual({ calls: 3 });
  });

  it('returns the first value that satisfies `until`, and tries again after a probe that throws', async () => {
    let calls = 0;
    const probe = async () => {
      calls += 1;
      if (calls === 1) throw new Error('not yet');
      return calls;
    };
    expect(await waitFor(probe, { what: 'a count of 4', until: (n) => n === 4, intervalMs: 1 })).toBe(4);
  });

  it('throws on timeout, naming what it waited for, how long, and the last value', async () => {
    await expect(waitFor(() => ({ state: 'pending' }), { what: 'the intent to run', until: (b) => b.state === 'executed', timeoutMs: 50, intervalMs: 5 })).rejects.toThrow(
      /^timed out after 50 ms \(\d+ probes\) waiting for the intent to run; last value: \{ state: 'pending' \}$/,
    );
  });

  it("throws on timeout with the last error the probe threw, and that error's cause, in the message and as the cause", async () => {
    const refused = new TypeError('fetch failed', { cause: new Error('connect ECONNREFUSED 127.0.0.1:9') });
    const waiting = waitFor(() => Promise.reject(refused), { what: 'the server to listen', timeoutMs: 30, intervalMs: 5 });
    await expect(waiting).rejects.toThrow(
      /waiting for the server to listen; the probe last threw: TypeError: fetch failed \(cause: Error: connect ECONNREFUSED 127\.0\.0\.1:9\)$/,
    );
    await expect(waiting).rejects.toMatchObject({ cause: refused });
  });

  it('does not wait past the deadline for a probe that never answers', async () => {
    const startedMs = Date.now();
    await expect(waitFor(() => new Promise<boolean>(() => {}), { what: 'a stalled server', timeoutMs: 50 })).rejects.toThrow(
      /waiting for a stalled server; the probe never answered$/,
    );
    expect(Date.now() - startedMs).toBeLessThan(1000);
  });
});
