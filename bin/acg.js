#!/usr/bin/env node
// The `acg` command. It runs the JavaScript that `npm install` built into dist/ (bin/build.js) when that
// build matches the sources; otherwise the TypeScript sources through tsx, which compiles them at each
// start, and says so on stderr (see docs/decisions.md, "A build step at install").
import { fileURLToPath } from 'node:url';
import { buildIsCurrent } from './build-state.js';

const root = fileURLToPath(new URL('..', import.meta.url));
let cli;
if (buildIsCurrent(root)) {
  cli = await import('../dist/cli.js');
} else {
  process.stderr.write('acg: dist/ does not match src/ (run `npm run build`); running the sources through tsx, which starts slower\n');
  const { register } = await import('tsx/esm/api');
  register();
  cli = await import('../src/cli.ts');
}
await cli.main(process.argv);
