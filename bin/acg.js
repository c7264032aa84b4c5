#!/usr/bin/env node
// The `acg` command. TypeScript sources run through tsx's loader, so there is no build step
// between `npm install` and `npm start` (see docs/decisions.md, "Run TypeScript through tsx").
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli.ts');
await main(process.argv);
