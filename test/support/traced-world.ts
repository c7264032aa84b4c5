// A world whose gateway exports its traces with the real SDK to the test OTLP receiver, and delivers webhooks to a
// local HTTPS receiver: the SDK reads the standard OTEL_* variables from the process environment, as `acg serve`
// does, so they are set for the file's run and put back after.
import { expect } from 'vitest';
import { traceOutboundHttp } from '../../src/platform/outbound.ts';
import { startTelemetry, stopTelemetry } from '../../src/platform/telemetry.ts';
import { startHookTarget, type HookTarget } from './merchants.ts';
import { startOtlpReceiver, type OtlpReceiver } from './otlp-receiver.ts';
import { startWorld, type World } from './world.ts';

const OTEL_ENV = { OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' };

export interface TracedWorld {
  otlp: OtlpReceiver;
  target: HookTarget;
  world: World;
  close(): Promise<void>;
}

/** `outboundHttp`: also trace the process's own outbound HTTP (node:http and undici), as `acg serve` does. */
export async function startTracedWorld(options: { outboundHttp?: boolean } = {}): Promise<TracedWorld> {
  const otlp = await startOtlpReceiver();
  const saved: Record<string, string | undefined> = {};
  for (const [name, value] of Object.entries({ ...OTEL_ENV, OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url })) {
    saved[name] = process.env[name];
    process.env[name] = value;
  }
  expect(await startTelemetry(process.env, { info: () => {}, warn: () => {}, error: () => {} })).toBe(true);
  if (options.outboundHttp) traceOutboundHttp();
  const target = await startHookTarget();
  const world = await startWorld({ env: { ACG_OUTBOUND_CA_FILE: target.caFile, ACG_ALLOW_PRIVATE_NETWORK_TARGETS: 'true' }, outbound: target.outbound });
  return {
    otlp,
    target,
    world,
    async close() {
      await world.close();
      await target.close();
      await stopTelemetry();
      for (const [name, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
      await otlp.close();
    },
  };
}
