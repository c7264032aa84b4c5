// The package as an agent or a merchant gets it: `npm pack`, the tarball installed into an empty project
// (@x402/core and jose come from the registry or npm's cache, as for anyone), imported by plain `node` (no
// tsx, no loader) and plugged into the installed @x402/core, and its declarations type-checked by tsc against a
// consumer file with skipLibCheck off. Not the repository's node_modules, not its sources.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onPostgres } from '../../../test/support/database.ts';

const run = promisify(execFile);
const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ROOT = path.resolve(PACKAGE, '../..');
const TSC = path.join(ROOT, 'node_modules/typescript/bin/tsc');

/** Plain ESM: the scheme registered with the installed x402 client and resource server, a price, a refusal. */
const CONSUMER_JS = `import { x402Client } from '@x402/core/client';
import { x402ResourceServer } from '@x402/core/server';
import { CREDIT_NETWORK, CreditSchemeClient, CreditSchemeServer, creditFacilitator, parseCreditPrice } from '@agent-credit-gateway/x402-credit';
const gatewayUrl = 'https://gateway.example.com';
const scheme = new CreditSchemeClient({ gatewayUrl, credential: 'token', fetch: () => { throw new Error('no call expected'); } });
const client = new x402Client().register(CREDIT_NETWORK, scheme);
new x402ResourceServer(creditFacilitator({ gatewayUrl, apiKey: 'key' })).register(CREDIT_NETWORK, new CreditSchemeServer({ gatewayUrl, merchantId: 'mer_1', offerId: 'off_1' }));
const accepts = [{ scheme: 'batch-settlement', network: CREDIT_NETWORK, asset: 'microcredit', amount: '500000', payTo: 'mer_1', maxTimeoutSeconds: 300,
  extra: { version: '1.0.0', authority: 'https://credits.evil.example', offerId: 'off_1', resource: 'https://api.shop.example/report' } }];
const refused = await client.createPaymentPayload({ x402Version: 2, resource: { url: 'https://api.shop.example/report' }, accepts }).then(() => 'paid', (error) => error.code);
console.log(JSON.stringify({ amount: parseCreditPrice('$0.005').amount, refused }));
`;

/** The consumer's types: what the declarations promise, and (by @ts-expect-error) that they are not \`any\`. */
const CONSUMER_TS = `import { x402Client } from '@x402/core/client';
import { x402ResourceServer } from '@x402/core/server';
import { checkCreditRoutes, CREDIT_NETWORK, CREDIT_SCHEME, CreditError, CreditSchemeClient, CreditSchemeServer, creditFacilitator, parseCreditPrice, verifyCreditRoutes, type CreditReceipt } from '@agent-credit-gateway/x402-credit';
export const client = new x402Client().register(CREDIT_NETWORK, new CreditSchemeClient({ gatewayUrl: 'https://gateway.example.com', credential: async () => 'token' }));
export const server = new x402ResourceServer(creditFacilitator({ gatewayUrl: 'https://gateway.example.com', apiKey: 'key' })).register(CREDIT_NETWORK, new CreditSchemeServer({ gatewayUrl: 'https://gateway.example.com', merchantId: 'mer_1', offerId: 'off_1' }));
export const amount: string = parseCreditPrice('$0.005').amount;
export const code = (error: unknown): string | undefined => (error instanceof CreditError ? error.code : undefined);
export const retryKey = (error: unknown): string | undefined => (error instanceof CreditError && error.code === 'approval_required' ? error.idempotencyKey : undefined);
export const charged = (receipt: CreditReceipt): string => receipt.capturedUc;
export const routes = checkCreditRoutes({ 'GET /report': { accepts: { scheme: CREDIT_SCHEME, network: CREDIT_NETWORK, price: '$0.005', payTo: 'mer_1' } } });
export const verified = (): Promise<typeof routes> => verifyCreditRoutes(routes, { gatewayUrl: 'https://gateway.example.com', merchantId: 'mer_1', offerId: 'off_1', apiKey: 'key' });
// @ts-expect-error verifyCreditRoutes reads the offers with the merchant's key
verifyCreditRoutes(routes, { gatewayUrl: 'https://gateway.example.com', merchantId: 'mer_1' });
// @ts-expect-error the agent's scheme needs a credential
new CreditSchemeClient({ gatewayUrl: 'https://gateway.example.com' });
`;

// What is tested is the package, not a database: once is enough.
describe.skipIf(onPostgres())('the packed x402-credit tarball', () => {
  const scratch = mkdtempSync(path.join(tmpdir(), 'acg-x402-tarball-'));
  const project = path.join(scratch, 'project');
  let tarball: string;

  beforeAll(async () => {
    // npm pack runs the package's prepack (bin/build.js --if-stale), so the tarball holds the current sources' build.
    await run('npm', ['pack', '--pack-destination', scratch], { cwd: PACKAGE });
    const packed = readdirSync(scratch).filter((name) => name.endsWith('.tgz'));
    expect(packed).toEqual(['agent-credit-gateway-x402-credit-0.1.0.tgz']);
    tarball = path.join(scratch, packed[0]!);
    mkdirSync(project);
    writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'tarball-consumer', private: true, type: 'module' }));
    await run('npm', ['install', '--prefix', project, '--no-audit', '--no-fund', '--no-package-lock', '--prefer-offline', tarball], { cwd: project });
  }, 60_000);

  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('holds the built JavaScript, its declarations, the README and the licence, and depends on @x402/core and jose only', async () => {
    const { stdout } = await run('tar', ['-tzf', tarball]);
    const files = stdout.trim().split('\n').map((entry) => entry.replace(/^package\//, '')).sort();
    const modules = ['client', 'constants', 'errors', 'facilitator', 'index', 'mcp', 'money', 'receipts', 'requirements', 'retry', 'routes', 'server', 'single-flight'];
    expect(files).toEqual(['LICENSE', 'README.md', ...modules.flatMap((name) => [`dist/${name}.d.ts`, `dist/${name}.js`]), 'package.json']);
    const manifest = JSON.parse(readFileSync(path.join(project, 'node_modules/@agent-credit-gateway/x402-credit/package.json'), 'utf8'));
    expect(manifest).toMatchObject({ license: 'Apache-2.0', type: 'module', exports: { '.': { types: './dist/index.d.ts', default: './dist/index.js' } } });
    expect(Object.keys(manifest.dependencies).sort()).toEqual(['@x402/core', 'jose']);
  });

  it('declares its modules by their shipped names (./client.js), in syntax TypeScript before 5.0 reads (no `export type *`)', () => {
    const dist = path.join(project, 'node_modules/@agent-credit-gateway/x402-credit/dist');
    for (const file of readdirSync(dist).filter((name) => name.endsWith('.d.ts'))) {
      const text = readFileSync(path.join(dist, file), 'utf8');
      const relative = [...text.matchAll(/(?:from |import\()'(\.[^']*)'/g)].map((match) => match[1]!);
      for (const specifier of relative) expect(specifier, `${file}: ${specifier}`).toMatch(/^\.\/[a-z-]+\.js$/);
      for (const specifier of relative) expect(readdirSync(dist), `${file}: ${specifier}`).toContain(specifier.slice(2).replace(/\.js$/, '.d.ts'));
      expect(text, file).not.toMatch(/export type \*/);
    }
  });

  it(`imports with plain node ${process.version} and plugs into the installed @x402/core`, async () => {
    writeFileSync(path.join(project, 'consumer.mjs'), CONSUMER_JS);
    const env = { ...process.env };
    delete env.NODE_OPTIONS;
    const { stdout } = await run(process.execPath, ['consumer.mjs'], { cwd: project, env });
    expect(JSON.parse(stdout)).toEqual({ amount: '500000', refused: 'authority_not_trusted' });
  });

  it('type-checks a consumer against its declarations (and theirs, skipLibCheck off)', async () => {
    writeFileSync(path.join(project, 'consumer.ts'), CONSUMER_TS);
    writeFileSync(
      path.join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          strict: true,
          noEmit: true,
          skipLibCheck: false,
          types: ['node'],
          typeRoots: [path.join(ROOT, 'node_modules/@types')],
        },
        files: ['consumer.ts'],
      }),
    );
    const checked = await run(process.execPath, [TSC, '--project', project], { cwd: project }).then(
      () => 'no errors',
      (error: { stdout: string; stderr: string }) => `${error.stdout}${error.stderr}`,
    );
    expect(checked).toBe('no errors');
  }, 60_000);
});
