// The served OpenAPI document is usable by the tools clients use: it passes Redocly's recommended
// ruleset, and types generated from it by openapi-typescript make a typed client that compiles, sends the
// Idempotency-Key through its typed header parameter, and refuses to compile when execute is given another
// action's input or no Idempotency-Key. The document does not depend
// on the database, so this runs on the embedded one only.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import ts from 'typescript';
import openapiTS, { astToString } from 'openapi-typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { onPostgres } from '../support/database.ts';

/** Redocly rules whose warnings the document must not have (errors are never allowed). */
const FORBIDDEN_WARNINGS = ['security-defined', 'operation-4xx-response', 'operation-operationId'];

const REDOCLY = join(process.cwd(), 'node_modules', '.bin', 'redocly');

let gw: TestGateway;
let document: Record<string, unknown>;
let dir: string;

beforeAll(async () => {
  if (onPostgres()) return;
  gw = await startTestGateway();
  document = await (await fetch(`${gw.url}/openapi.json`)).json();
  dir = await mkdtemp(join(tmpdir(), 'acg-openapi-'));
});
afterAll(async () => {
  if (onPostgres()) return;
  await gw.close();
  await rm(dir, { recursive: true, force: true });
});

interface LintProblem {
  ruleId: string;
  severity: 'error' | 'warn';
  message: string;
  location: Array<{ pointer: string }>;
}

describe.skipIf(onPostgres())('the OpenAPI document', () => {
  it("passes Redocly's recommended ruleset with no errors and none of the forbidden warnings", async () => {
    const file = join(dir, 'openapi.json');
    await writeFile(file, JSON.stringify(document));
    // Redocly exits non-zero when it finds errors; its JSON report on stdout is what is checked.
    const { stdout } = await promisify(execFile)(REDOCLY, ['lint', file, '--extends=recommended', '--format=json'], {
      cwd: dir,
      env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
      maxBuffer: 16 * 1024 * 1024,
    }).catch((error: { stdout?: string }) => ({ stdout: error.stdout ?? '' }));
    const problems = (JSON.parse(stdout) as { problems: LintProblem[] }).problems;
    const describe = (p: LintProblem) => `${p.ruleId}: ${p.message} at ${p.location[0]?.pointer}`;
    expect(problems.filter((p) => p.severity === 'error').map(describe)).toEqual([]);
    expect(problems.filter((p) => FORBIDDEN_WARNINGS.includes(p.ruleId)).map(describe)).toEqual([]);
  });

  it('generates types that make a typed execute client with a typed Idempotency-Key, which refuses a mail input for github-public repository.get', async () => {
    await writeFile(join(dir, 'api.ts'), astToString(await openapiTS(JSON.stringify(document))));
    await writeFile(
      join(dir, 'client.ts'),
      [
        "import type { paths } from './api.ts';",
        "type Execute = paths['/v1/services/execute']['post'];",
        "export type ExecuteBody = Execute['requestBody']['content']['application/json'];",
        "export type ExecuteResult = Execute['responses'][200]['content']['application/json'];",
        "export type ExecuteHeaders = Execute['parameters']['header'];",
        'export function executeRequest(headers: ExecuteHeaders, body: ExecuteBody): { method: "POST"; path: string; headers: Record<string, string>; body: string } {',
        "  return { method: 'POST', path: '/v1/services/execute', headers: { 'idempotency-key': headers['Idempotency-Key'] }, body: JSON.stringify(body) };",
        '}',
      ].join('\n'),
    );
    await writeFile(
      join(dir, 'good.ts'),
      "import { executeRequest } from './client.ts';\n" +
        "export const good = executeRequest({ 'Idempotency-Key': 'a7f3c1' }, { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'hello-world' } });\n",
    );
    await writeFile(
      join(dir, 'bad.ts'),
      "import { executeRequest } from './client.ts';\n" +
        "export const bad = executeRequest({ 'Idempotency-Key': 'a7f3c2' }, { serviceId: 'github-public', action: 'repository.get', input: { inbox: 'INBOX' } });\n",
    );
    await writeFile(
      join(dir, 'keyless.ts'),
      "import { executeRequest } from './client.ts';\n" +
        "export const keyless = executeRequest({}, { serviceId: 'github-public', action: 'repository.get', input: { owner: 'octocat', repo: 'hello-world' } });\n",
    );
    const program = ts.createProgram(
      ['good.ts', 'bad.ts', 'keyless.ts'].map((name) => join(dir, name)),
      {
        strict: true,
        noEmit: true,
        target: ts.ScriptTarget.ES2022,
        module: ts.ModuleKind.ESNext,
        moduleResolution: ts.ModuleResolutionKind.Bundler,
        allowImportingTsExtensions: true,
        lib: ['lib.es2022.d.ts'],
        types: [],
      },
    );
    const diagnostics = ts.getPreEmitDiagnostics(program).map((d) => ({
      file: d.file ? d.file.fileName.slice(dir.length + 1) : '',
      message: ts.flattenDiagnosticMessageText(d.messageText, '\n'),
    }));
    expect(diagnostics.filter((d) => d.file !== 'bad.ts' && d.file !== 'keyless.ts')).toEqual([]);
    const refusals = diagnostics.filter((d) => d.file === 'bad.ts');
    expect(refusals.length).toBeGreaterThan(0);
    expect(refusals.map((d) => d.message).join('\n')).toMatch(/inbox|owner/);
    const keyless = diagnostics.filter((d) => d.file === 'keyless.ts');
    expect(keyless.map((d) => d.message).join('\n')).toMatch(/Idempotency-Key/);
  });
});
