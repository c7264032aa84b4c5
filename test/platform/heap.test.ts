// `acg serve`'s heap policy (src/platform/heap.ts): V8's heap growing factor is set to 1.3 unless the
// operator chose one in the node options or NODE_OPTIONS, in either spelling V8 accepts.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { describe, expect, it } from 'vitest';
import { applyHeapPolicy } from '../../src/platform/heap.ts';

describe('the heap policy of acg serve', () => {
  it("leaves the operator's own growing factor alone", () => {
    expect(applyHeapPolicy(['--heap-growing-percent=80'], '')).toBe(false);
    expect(applyHeapPolicy([], '--max-old-space-size=512 --heap_growing_percent=50')).toBe(false);
  });

  it('sets its own otherwise, whatever other node options are given', () => {
    expect(applyHeapPolicy(['--enable-source-maps'], '--max-old-space-size=512')).toBe(true);
    expect(applyHeapPolicy([], '')).toBe(true);
  });
});
