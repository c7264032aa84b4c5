// The tree reads as faces (HTTP, MCP) → feature operations, services and stores → platform, with arrows one
// way (docs/architecture.md). This test reads every source file's imports and holds two rules:
//   1. only the HTTP face (route files, src/platform/http/, src/mcp/http.ts) and the composition root
//      (src/app.ts, src/server.ts) import Fastify;
//   2. the import graph of src/ has no cycle (type-only imports included: a cycle of types is a knot too).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = path.resolve('src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith('.ts') ? [full] : [];
  });
}

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g;

function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(IMPORT)].map((match) => match[1] ?? match[2]!);
}

const relative = (file: string) => path.relative(SRC, file).split(path.sep).join('/');

function isHttpFace(file: string): boolean {
  return /(^|\/)([a-z-]+-)?routes\.ts$/.test(file) || file.startsWith('platform/http/') || file === 'mcp/http.ts' || file === 'app.ts' || file === 'server.ts';
}

function fastifyImporters(files: Map<string, string[]>): string[] {
  return [...files]
    .filter(([file, imports]) => !isHttpFace(file) && imports.some((spec) => spec === 'fastify' || spec.startsWith('@fastify/') || spec.startsWith('fastify/')))
    .map(([file]) => file);
}

/** Every cycle's members, found by Tarjan's strongly connected components (a component of 2+ files is a cycle). */
function cycles(files: Map<string, string[]>): string[][] {
  const graph = new Map<string, string[]>();
  for (const [file, imports] of files) {
    const targets = imports.filter((spec) => spec.startsWith('.')).map((spec) => path.posix.normalize(path.posix.join(path.posix.dirname(file), spec)));
    graph.set(file, targets.filter((target) => files.has(target)));
  }
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

function readTree(): Map<string, string[]> {
  return new Map(sourceFiles(SRC).map((file) => [relative(file), importsOf(file)]));
}

describe('architecture', () => {
  it('keeps Fastify inside the HTTP face and the composition root', () => {
    expect(fastifyImporters(readTree())).toEqual([]);
  });

  it('has no import cycle in src/', () => {
    expect(cycles(readTree())).toEqual([]);
  });

  it('notices a Fastify import outside the face, and a cycle (the rules can fail)', () => {
    const broken = new Map([
      ['ledger/service.ts', ['fastify', './store.ts']],
      ['ledger/store.ts', ['./service.ts']],
      ['ledger/routes.ts', ['fastify']],
    ]);
    expect(fastifyImporters(broken)).toEqual(['ledger/service.ts']);
    expect(cycles(broken)).toEqual([['ledger/service.ts', 'ledger/store.ts']]);
  });
});
