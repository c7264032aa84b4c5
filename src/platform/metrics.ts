import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export class Metrics {
  readonly registry = new Registry();
  readonly httpRequests = new Counter({
    name: 'acg_http_requests_total',
    help: 'HTTP requests answered, by method, route pattern and status code',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [this.registry],
  });
  readonly httpDuration = new Histogram({
    name: 'acg_http_request_duration_seconds',
    help: 'Time from request to response, by method and route pattern',
    labelNames: ['method', 'route'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [this.registry],
  });
  readonly tokenVerifications = new Counter({
    name: 'acg_bearer_token_verifications_total',
    help: 'Bearer JWTs presented, by outcome: verified (signature and claims checked) or reused (an earlier verification of the same token)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  constructor(options: { processMetrics: boolean }) {
    if (options.processMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'acg_' });
  }
}
