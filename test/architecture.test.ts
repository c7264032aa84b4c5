// The tree reads as faces (HTTP, MCP, CLI) → features (operations, queries, services, stores) → platform,
// with arrows one way (docs/architecture.md, "Layers"). This test reads every source file's imports (type-only
// imports included: a type that crosses layers must live below both) and holds the layer table:
//   1. a face never imports another feature's face (the platform's HTTP toolkit is shared by every face);
//   2. nothing below the faces imports a face, and only faces and the composition root import Fastify;
//   3. connectors import only the platform; the platform imports only the platform;
//   4. a feature never imports another feature's store, and no two features import each other;
//   5. the import graph of src/ has no cycle.
// It also holds rules the docs state, at the level of the syntax tree (TypeScript's own parser):
//   6. a function whose SQL locks rows takes a `Tx` first, and a find and a lock are two functions;
//   7. a service never writes a header: `Retry-After` comes from `ApiError.retryAfterS`;
//   8. `newSecret` (src/platform/ids.ts) is the only code that draws random bytes.
// And one rule of the tests themselves:
//   9. no test file mocks a module: a worker runs its files in one module cache (vitest.config.ts, `isolate:
//      false`), where a mock would reach the files after it, or miss a module a file before it loaded.
// Each rule is also run against a planted violation, so it is known to fail when it should.
// vitest: no database (the PostgreSQL pass skips this file: test/support/no-database.ts)
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { noDatabaseTestFiles, testFiles } from './support/no-database.ts';

const SRC = path.resolve('src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith('.ts') ? [full] : [];
  });
}

const relative = (file: string) => path.relative(SRC, file).split(path.sep).join('/');

/** Every file of src/, by its path under src/, with its text. */
function readTree(): Map<string, string> {
  return new Map(sourceFiles(SRC).map((file) => [relative(file), readFileSync(file, 'utf8')]));
}

/**
 * A file's imports (static, side-effect only, re-exports, `import type`, dynamic `import('…')`), read with
 * TypeScript's parser, resolved to paths under src/ for relative ones, as written for packages.
 */
function importsOf(file: string, text: string): string[] {
  const specifiers: string[] = [];
  walk(parse(file, text), (node) => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      specifiers.push(node.moduleSpecifier.text);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword && node.arguments[0] && ts.isStringLiteral(node.arguments[0])) {
      specifiers.push(node.arguments[0].text);
    }
  });
  return specifiers.map((spec) => (spec.startsWith('.') ? path.posix.normalize(path.posix.join(path.posix.dirname(file), spec)) : spec));
}

type Layer = 'root' | 'face' | 'feature' | 'connector' | 'platform';

const ROOT = new Set(['app.ts', 'server.ts', 'cli.ts']);

/** The layer of a file (docs/architecture.md, "Layers"). */
export function layerOf(file: string): Layer {
  if (ROOT.has(file)) return 'root';
  if (file.startsWith('platform/http/') || file.startsWith('mcp/')) return 'face';
  if (/(^|\/)([a-z-]+-)?(routes|cli|pages?)\.ts$/.test(file)) return 'face';
  if (file.startsWith('connectors/')) return 'connector';
  if (file.startsWith('platform/')) return 'platform';
  return 'feature';
}

/** The unit a file belongs to: its top-level folder (`platform/http` apart: the faces' shared toolkit). */
export function unitOf(file: string): string {
  return file.startsWith('platform/http/') ? 'platform/http' : file.split('/')[0]!;
}

const isFastify = (spec: string) => spec === 'fastify' || spec.startsWith('@fastify/') || spec.startsWith('fastify/');

/** Every broken layer rule, one line each: `from → to: rule`. */
export function layerViolations(tree: Map<string, string[]>): string[] {
  const found: string[] = [];
  for (const [file, imports] of tree) {
    const layer = layerOf(file);
    for (const target of imports) {
      if (isFastify(target) && (layer === 'feature' || layer === 'connector' || layer === 'platform')) found.push(`${file} → ${target}: only faces import Fastify`);
      if (!tree.has(target)) continue;
      const targetLayer = layerOf(target);
      const sameUnit = unitOf(file) === unitOf(target);
      if (layer === 'face' && targetLayer === 'face' && !sameUnit && unitOf(target) !== 'platform/http') found.push(`${file} → ${target}: a face imports another face`);
      if (layer !== 'face' && layer !== 'root' && targetLayer === 'face') found.push(`${file} → ${target}: a face is imported from below`);
      if (layer === 'connector' && targetLayer !== 'connector' && targetLayer !== 'platform') found.push(`${file} → ${target}: a connector imports only the platform`);
      if (layer === 'platform' && targetLayer !== 'platform') found.push(`${file} → ${target}: the platform imports nothing above it`);
      if (!sameUnit && layer !== 'root' && /(^|\/)store\.ts$/.test(target)) found.push(`${file} → ${target}: another feature's store`);
    }
  }
  return found;
}

/** Pairs of features (top-level folders below the faces' own) that import each other, through any of their files. */
export function mutualFeatures(tree: Map<string, string[]>): string[] {
  const edges = new Set<string>();
  for (const [file, imports] of tree) {
    if (layerOf(file) === 'root') continue;
    for (const target of imports) {
      if (!tree.has(target) || unitOf(file) === unitOf(target)) continue;
      edges.add(`${unitOf(file)}→${unitOf(target)}`);
    }
  }
  const pairs: string[] = [];
  for (const edge of edges) {
    const [from, to] = edge.split('→') as [string, string];
    if (from < to && edges.has(`${to}→${from}`)) pairs.push(`${from} ↔ ${to}`);
  }
  return pairs.sort();
}

/** Every cycle's members, found by Tarjan's strongly connected components (a component of 2+ files is a cycle). */
function cycles(tree: Map<string, string[]>): string[][] {
  const graph = new Map<string, string[]>([...tree].map(([file, imports]) => [file, imports.filter((target) => tree.has(target))]));
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (node: string) => {
    index.set(node, next);
    low.set(node, next++);
    stack.push(node);
    onStack.add(node);
    for (const target of graph.get(node) ?? []) {
      if (!index.has(target)) {
        visit(target);
        low.set(node, Math.min(low.get(node)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(node, Math.min(low.get(node)!, index.get(target)!));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const component: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      component.push(member);
    } while (member !== node);
    if (component.length > 1 || graph.get(node)!.includes(node)) found.push(component.sort());
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return found;
}

function importTree(texts: Map<string, string>): Map<string, string[]> {
  return new Map([...texts].map(([file, text]) => [file, importsOf(file, text)]));
}

function parse(file: string, text: string): ts.SourceFile {
  return ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true, ts.ScriptKind.TS);
}

function walk(node: ts.Node, visit: (node: ts.Node) => void): void {
  visit(node);
  node.forEachChild((child) => walk(child, visit));
}

const LOCK_CLAUSE = /\bFOR\s+(UPDATE|SHARE|NO\s+KEY\s+UPDATE|KEY\s+SHARE)\b/i;

function isStringLike(node: ts.Node): node is ts.StringLiteral | ts.NoSubstitutionTemplateLiteral | ts.TemplateHead | ts.TemplateMiddle | ts.TemplateTail {
  return ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node) || ts.isTemplateHead(node) || ts.isTemplateMiddle(node) || ts.isTemplateTail(node);
}

/** Functions whose SQL locks rows but do not take a `Tx` first, or lock only sometimes (one line each). */
export function lockViolations(texts: Map<string, string>): string[] {
  const found: string[] = [];
  for (const [file, text] of texts) {
    const source = parse(file, text);
    walk(source, (node) => {
      if (!isStringLike(node) || !LOCK_CLAUSE.test(node.text)) return;
      let conditional = false;
      let owner: ts.Node | undefined = node.parent;
      while (owner && !ts.isFunctionLike(owner)) {
        if (ts.isConditionalExpression(owner)) conditional = true;
        owner = owner.parent;
      }
      const line = source.getLineAndCharacterOfPosition(node.getStart()).line + 1;
      if (!owner) return void found.push(`${file}:${line}: a lock clause outside any function`);
      const first = (owner as ts.SignatureDeclaration).parameters[0];
      if (first?.type?.getText(source) !== 'Tx') found.push(`${file}:${line}: a function that locks rows must take a Tx first`);
      if (conditional) found.push(`${file}:${line}: a lock taken only sometimes: a find and a lock are two functions`);
    });
  }
  return found;
}

/** Where a feature, a connector or the platform writes a `Retry-After` itself (only the error's renderers may). */
export function headerWriters(texts: Map<string, string>): string[] {
  const found: string[] = [];
  for (const [file, text] of texts) {
    if (file === 'platform/errors.ts' || layerOf(file) === 'face' || layerOf(file) === 'root') continue;
    const source = parse(file, text);
    walk(source, (node) => {
      const name = ts.isPropertyAssignment(node) && (ts.isStringLiteral(node.name) || ts.isIdentifier(node.name)) ? node.name.text : undefined;
      if (name !== undefined && /^retry-after$/i.test(name)) {
        found.push(`${file}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}: Retry-After written by hand (use ApiError.retryAfterS)`);
      }
    });
  }
  return found;
}

const RANDOM_SOURCES = /\b(randomBytes|randomFillSync|randomFill|getRandomValues|randomInt|generateKeySync)\b/;

/** Files other than src/platform/ids.ts that draw random bytes themselves. */
export function randomSources(texts: Map<string, string>): string[] {
  const found: string[] = [];
  for (const [file, text] of texts) {
    if (file === 'platform/ids.ts') continue;
    const source = parse(file, text);
    walk(source, (node) => {
      if (ts.isIdentifier(node) && RANDOM_SOURCES.test(node.text)) {
        found.push(`${file}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}: ${node.text} (use newSecret or newSecretBytes)`);
      }
    });
  }
  return [...new Set(found)];
}

const MODULE_MOCKS = /\bvi\s*\.\s*(mock|doMock|unmock|doUnmock|resetModules|importMock)\s*\(/;

/** Test files (by path) that mock a module or reset the module cache, at each line that does. */
export function moduleMocks(texts: Map<string, string>): string[] {
  const found: string[] = [];
  for (const [file, text] of texts) {
    text.split('\n').forEach((line, index) => {
      if (MODULE_MOCKS.test(line)) found.push(`${file}:${index + 1}: a module mock (pass the stand-in as a parameter instead)`);
    });
  }
  return found;
}

/** Every test file of the repository (test/ and each package's test/), by its path from the root, with its text. */
function readTests(): Map<string, string> {
  return new Map(testFiles('.').map((file) => [file, readFileSync(file, 'utf8')]));
}

/**
 * What a module that reads which database the pass runs on says (test/support/database.ts and its like): the
 * pass's variables, or vitest's `inject`, which hands out the pass's migrated database (global-setup.ts).
 */
const READS_TEST_DATABASE = /process\.env\.(ACG_TEST_DB|TEST_DATABASE_URL)\b|import\s*\{[^}]*\binject\b[^}]*\}\s*from\s*'vitest'/;

/**
 * Test files marked as using no database (test/support/no-database.ts) that reach, through their relative
 * imports, a module that reads which database the pass runs on: the PostgreSQL pass, which skips them, would
 * have run them differently. `read` gives a file's text by its path from the root, or undefined.
 */
export function misleadingNoDatabaseMarks(marked: readonly string[], read: (file: string) => string | undefined): string[] {
  const found: string[] = [];
  for (const start of marked) {
    const seen = new Set<string>();
    const queue = [start];
    while (queue.length > 0) {
      const file = queue.pop()!;
      if (seen.has(file)) continue;
      seen.add(file);
      const text = read(file);
      if (text === undefined) continue;
      if (READS_TEST_DATABASE.test(text)) {
        found.push(`${start}: marked "no database" but reaches ${file}, which reads the database under test`);
        break;
      }
      // Relative imports come back resolved, with their extension; a package's is followed only when `read` finds it.
      for (const spec of importsOf(file, text)) if (/\.[cm]?[jt]s$/.test(spec)) queue.push(spec);
    }
  }
  return found;
}

const readIfExists = (file: string): string | undefined => {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
};

describe('architecture', () => {
  const texts = readTree();
  const tree = importTree(texts);

  it('keeps the layer table: no face imports a face, nothing imports up, connectors and the platform stay below', () => {
    expect(layerViolations(tree)).toEqual([]);
  });

  it('has no pair of features importing each other', () => {
    expect(mutualFeatures(tree)).toEqual([]);
  });

  it('has no import cycle in src/', () => {
    expect(cycles(tree)).toEqual([]);
  });

  it('lock functions take a Tx, and lock always', () => {
    expect(lockViolations(texts)).toEqual([]);
  });

  it('services never write a Retry-After header', () => {
    expect(headerWriters(texts)).toEqual([]);
  });

  it('newSecret is the only generator of secrets', () => {
    expect(randomSources(texts)).toEqual([]);
  });

  it('no test file mocks a module', () => {
    const tests = readTests();
    expect(tests.size).toBeGreaterThan(100);
    expect(moduleMocks(tests)).toEqual([]);
  });

  it('no test file marked as using no database reaches one', () => {
    const marked = noDatabaseTestFiles(path.resolve('.'));
    expect(marked.length).toBeGreaterThan(10);
    expect(misleadingNoDatabaseMarks(marked, readIfExists)).toEqual([]);
  });
});

describe('the rules can fail', () => {
  it('notices a file marked as using no database that reaches the database under test through a helper', () => {
    const planted = new Map([
      ['test/a.test.ts', "// vitest: no database\nimport { helper } from './support/helper.ts';"],
      ['test/support/helper.ts', "import { testDbKind } from './database.ts';"],
      // Spelled in two parts, so that this file itself does not read as one that reads the database under test.
      ['test/support/database.ts', `export const testDbKind = () => process.env.${'ACG_TEST_DB'};`],
      ['test/b.test.ts', "// vitest: no database\nimport { waitFor } from './support/wait.ts';"],
      ['test/support/wait.ts', 'export const waitFor = 1;'],
    ]);
    expect(misleadingNoDatabaseMarks(['test/a.test.ts', 'test/b.test.ts'], (file) => planted.get(file))).toEqual([
      'test/a.test.ts: marked "no database" but reaches test/support/database.ts, which reads the database under test',
    ]);
  });

  it('notices a face importing a face, Fastify below the faces, a store of another feature, and a cycle', () => {
    const planted = new Map([
      ['events/routes.ts', ['merchants/routes.ts', 'platform/http/operation.ts']],
      ['merchants/routes.ts', ['merchants/service.ts']],
      ['merchants/service.ts', ['fastify', 'events/store.ts', 'ledger/routes.ts']],
      ['events/store.ts', ['platform/db/database.ts']],
      ['ledger/routes.ts', ['fastify']],
      ['connectors/mail.ts', ['agents/service.ts']],
      ['agents/service.ts', ['platform/ids.ts']],
      ['platform/ids.ts', ['agents/service.ts']],
      ['platform/http/operation.ts', []],
      ['platform/db/database.ts', []],
    ]);
    expect(layerViolations(planted)).toEqual([
      'events/routes.ts → merchants/routes.ts: a face imports another face',
      'merchants/service.ts → fastify: only faces import Fastify',
      "merchants/service.ts → events/store.ts: another feature's store",
      'merchants/service.ts → ledger/routes.ts: a face is imported from below',
      'connectors/mail.ts → agents/service.ts: a connector imports only the platform',
      'platform/ids.ts → agents/service.ts: the platform imports nothing above it',
    ]);
    expect(mutualFeatures(planted)).toEqual(['agents ↔ platform', 'events ↔ merchants']);
    expect(cycles(planted)).toEqual([['agents/service.ts', 'platform/ids.ts']]);
  });

  it('notices a lock function taking the pool, and a find that locks only sometimes', () => {
    const planted = new Map([
      [
        'x/store.ts',
        [
          'export async function lockA(db: Queryable, id: string) { return db.query("SELECT * FROM a WHERE id = $1 FOR UPDATE", [id]); }',
          'export async function findB(tx: Tx, id: string, lock = false) { return tx.query(`SELECT * FROM b WHERE id = $1${lock ? " FOR UPDATE" : ""}`, [id]); }',
          'export async function lockC(tx: Tx, id: string) { return tx.query("SELECT * FROM c WHERE id = $1 FOR SHARE", [id]); }',
        ].join('\n'),
      ],
    ]);
    expect(lockViolations(planted)).toEqual([
      'x/store.ts:1: a function that locks rows must take a Tx first',
      'x/store.ts:2: a lock taken only sometimes: a find and a lock are two functions',
    ]);
  });

  it('notices a hand-written Retry-After and a random source outside ids.ts', () => {
    const planted = new Map([['x/service.ts', "import { randomBytes } from 'node:crypto';\nthrow new ApiError('conflict', { headers: { 'retry-after': '5' } });"]]);
    expect(headerWriters(planted)).toEqual(['x/service.ts:2: Retry-After written by hand (use ApiError.retryAfterS)']);
    expect(randomSources(planted)).toEqual(['x/service.ts:1: randomBytes (use newSecret or newSecretBytes)']);
  });

  it('notices a module mock in a test file', () => {
    const planted = new Map([['test/x.test.ts', "import { vi } from 'vitest';\nvi.mock('../src/platform/telemetry-sdk.ts', () => ({}));"]]);
    expect(moduleMocks(planted)).toEqual(['test/x.test.ts:2: a module mock (pass the stand-in as a parameter instead)']);
  });
});
