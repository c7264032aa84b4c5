// vitest: no database
// The gateway's own directories: made owner-only from the nearest existing parent down, never forever.
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makePrivateDirectory } from '../../src/platform/data-dir.ts';

const root = mkdtempSync(path.join(tmpdir(), 'acg-data-dir-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('makePrivateDirectory', () => {
  it('makes the directory and each missing parent 0700, and leaves an existing one as it is', () => {
    const dir = path.join(root, 'a', 'b', 'c');
    makePrivateDirectory(dir);
    for (const made of [path.join(root, 'a'), path.join(root, 'a', 'b'), dir]) {
      expect(statSync(made).isDirectory()).toBe(true);
      expect(statSync(made).mode & 0o777).toBe(0o700);
    }
    makePrivateDirectory(dir);
    expect(statSync(dir).isDirectory()).toBe(true);
  });

  it('refuses a file where the directory should be, and under a file, with ENOTDIR', () => {
    const file = path.join(root, 'file');
    writeFileSync(file, 'not a directory');
    expect(() => makePrivateDirectory(file)).toThrow(expect.objectContaining({ code: 'ENOTDIR' }));
    expect(() => makePrivateDirectory(path.join(file, 'inside'))).toThrow(expect.objectContaining({ code: 'ENOTDIR' }));
  });

  it.runIf(process.platform === 'linux')('refuses a name under /proc at once, where a recursive mkdir loops forever', () => {
    expect(() => makePrivateDirectory('/proc/acg-data-dir-test/inner')).toThrow(expect.objectContaining({ code: 'ENOENT' }));
  });
});
