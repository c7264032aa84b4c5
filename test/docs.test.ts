// The README and docs/*.md as a reader follows them: every relative link reaches a file (and a heading,
// when it names one), every `docs/decisions.md "…"` reference names a section that exists, every
// repository path in backticks exists (or is a generated output the repository ignores), and the
// configuration table is the gateway's own list of variables.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ENV_VARS, variableMeaning } from '../src/platform/config.ts';
import { GATEWAY_VERSION } from '../src/platform/version.ts';

const ROOT = path.resolve('.');
const DOCS = ['README.md', ...readdirSync(path.join(ROOT, 'docs')).filter((name) => name.endsWith('.md')).map((name) => `docs/${name}`)];

/**
 * Broken references the lead removes when sweeping docs/decisions.md's history (a file that was never in
 * the repository). Listed so that the sweep also empties this list: the test fails while either is stale.
 */
const KNOWN_BROKEN: string[] = [];

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
export function slug(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function headings(file: string): string[] {
  return [...readFileSync(path.join(ROOT, file), 'utf8').matchAll(/^#{1,6} +(.+?) *$/gm)].map((match) => match[1]!.replace(/`/g, ''));
}

/** Fenced code is quoted material (shell, JSON), not references: left out. */
function prose(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, '');
}

function isIgnoredByGit(relativePath: string): boolean {
  try {
    execFileSync('git', ['check-ignore', '-q', '--no-index', relativePath], { cwd: ROOT, stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Every reference in one document (by default its text in the repository) that does not resolve, one line each. */
function brokenReferences(file: string, markdown = readFileSync(path.join(ROOT, file), 'utf8')): string[] {
  const text = prose(markdown);
  const broken: string[] = [];
  const dir = path.posix.dirname(file);

  for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
    if (/^[a-z][a-z+.-]*:/i.test(target!)) continue; // http:, https:, mailto:
    const [filePart, anchor] = target!.split('#', 2) as [string, string | undefined];
    const resolved = filePart === '' ? file : path.posix.normalize(path.posix.join(dir, filePart));
    if (!existsSync(path.join(ROOT, resolved))) {
      broken.push(`${file}: link ${target} does not exist`);
      continue;
    }
    if (anchor !== undefined && resolved.endsWith('.md') && !headings(resolved).map(slug).includes(anchor)) {
      broken.push(`${file}: link ${target} names no heading of ${resolved}`);
    }
  }

  // `docs/decisions.md ("Title")`, `docs/decisions.md, "Title"`; and, inside decisions.md, `see "Title"`.
  const sections = headings('docs/decisions.md');
  const quoted = [...text.matchAll(/decisions\.md`?\)?[ ,(]*(?:section )?"([^"]+)"/g)].map((match) => match[1]!);
  if (file === 'docs/decisions.md') quoted.push(...[...text.matchAll(/\b[Ss]ee "([^"]+)"/g)].map((match) => match[1]!));
  for (const title of quoted.map((text) => text.replace(/\s+/g, ' '))) {
    if (!sections.includes(title)) broken.push(`${file}: docs/decisions.md has no section "${title}"`);
  }

  for (const [, repoPath] of text.matchAll(/`((?:src|test|bench|docs|bin|packages|research|scripts|deploy|\.ci)\/[\w./-]*)`/g)) {
    if (!existsSync(path.join(ROOT, repoPath!)) && !isIgnoredByGit(repoPath!)) broken.push(`${file}: \`${repoPath}\` does not exist`);
  }
  return broken;
}

/** The configuration table, as docs/configuration.md carries it. */
export function configurationTable(): string {
  const cell = (text: string) => text.replaceAll('|', '\\|');
  return ['| Variable | Default | Meaning |', '|---|---|---|', ...ENV_VARS.map((v) => `| \`${v.name}\` | ${cell(v.default)} | ${cell(variableMeaning(v))} |`)].join('\n');
}

describe('the documentation', () => {
  it('has no broken link, section reference or repository path', () => {
    expect(DOCS).toEqual(expect.arrayContaining(['README.md', 'docs/configuration.md', 'docs/benchmark.md', 'docs/operations.md']));
    expect(DOCS.flatMap((file) => brokenReferences(file))).toEqual(KNOWN_BROKEN);
  });

  it('notices a broken link, anchor, section reference and path, and passes good ones (the check can fail)', () => {
    const good = [
      'See [the decisions](decisions.md#operator-access-to-a-running-gateway), [the README](../README.md),',
      '`docs/decisions.md` ("Operator access to a running gateway"), `src/cli.ts`, `bench/results/latest.json` (generated).',
      '```sh\ncat `research/none.md` [x](nowhere.md)\n```',
    ].join('\n');
    expect(brokenReferences('docs/example.md', good)).toEqual([]);
    const bad = [
      '[gone](gone.md), [no heading](decisions.md#no-such-heading), docs/decisions.md, "Group commit: built, measured, not merged",',
      'and `research/perf.md`.',
    ].join('\n');
    expect(brokenReferences('docs/example.md', bad)).toEqual([
      'docs/example.md: link gone.md does not exist',
      'docs/example.md: link decisions.md#no-such-heading names no heading of docs/decisions.md',
      'docs/example.md: docs/decisions.md has no section "Group commit: built, measured, not merged"',
      'docs/example.md: `research/perf.md` does not exist',
    ]);
    expect(slug('`acg demo`')).toBe('acg-demo');
  });

  it('names the release package.json names, in the OpenAPI document and the MCP server info (found from outside: 1.0.0 of a 0.1.0 package)', () => {
    expect(GATEWAY_VERSION).toBe(JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version);
  });

  it('carries the gateway\'s own list of environment variables as the configuration table', () => {
    expect(readFileSync(path.join(ROOT, 'docs/configuration.md'), 'utf8')).toContain(`${configurationTable()}\n`);
  });

  it('names no internal tracker numbers outside the decisions history', () => {
    for (const file of DOCS.filter((name) => name !== 'docs/decisions.md')) {
      expect(readFileSync(path.join(ROOT, file), 'utf8'), file).not.toMatch(/\bissues? #?\d+/i);
    }
  });
});
