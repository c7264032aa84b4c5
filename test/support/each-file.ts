// Runs in every test file (vitest `setupFiles`): what a file started and left running ends with the file.
import { afterAll } from 'vitest';
import { killLeftoverGateways } from './process.ts';

afterAll(() => killLeftoverGateways());
