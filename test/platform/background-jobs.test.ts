// The gateway's periodic jobs: a job of a long interval also runs soon after start, so an instance restarted more
// often than its interval still runs it (docs/decisions.md "Periodic jobs run soon after start").
import { afterEach, describe, expect, it, vi } from 'vitest';
import { FIRST_RUN_AFTER_MS } from '../../src/platform/gateway.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

let gw: TestGateway | undefined;
afterEach(async () => {
  vi.useRealTimers();
  await gw?.close();
  gw = undefined;
});

describe('periodic jobs', () => {
  it('run a 10-minute sweep once soon after start, then at its interval (found from outside: a restart every few minutes never purged)', async () => {
    gw = await startTestGateway();
    const sweep = vi.spyOn(gw.gateway.idempotency, 'sweep').mockResolvedValue(0);
    const purge = vi.fn(async () => {});
    const often = vi.fn(async () => {});
    gw.gateway.schedule('test-purge', 60 * 60 * 1000, purge);
    gw.gateway.schedule('test-often', 5000, often);
    vi.useFakeTimers({ toFake: ['setTimeout', 'setInterval', 'clearTimeout', 'clearInterval'] });
    gw.gateway.startBackgroundWork();
    await vi.advanceTimersByTimeAsync(FIRST_RUN_AFTER_MS - 1);
    expect([sweep.mock.calls.length, purge.mock.calls.length]).toEqual([0, 0]);
    await vi.advanceTimersByTimeAsync(1);
    expect([sweep.mock.calls.length, purge.mock.calls.length]).toEqual([1, 1]);
    // A short job keeps its own interval only: no run at the first-run moment besides its own.
    expect(often.mock.calls.length).toBe(Math.floor(FIRST_RUN_AFTER_MS / 5000));
    await vi.advanceTimersByTimeAsync(10 * 60 * 1000 - FIRST_RUN_AFTER_MS);
    expect([sweep.mock.calls.length, purge.mock.calls.length]).toEqual([2, 1]);
    await gw.gateway.stop();
    await vi.advanceTimersByTimeAsync(60 * 60 * 1000);
    expect([sweep.mock.calls.length, purge.mock.calls.length]).toEqual([2, 1]);
  });
});
