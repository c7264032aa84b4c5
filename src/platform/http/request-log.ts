// One log line per request. Fastify's default writes two ("incoming request", then "request completed"
// without the method or path); this controller writes one when the response is finished: method, path and
// address (the request serializer), status, response time, and for a refusal or failure the code and reason
// that render-error.ts recorded on the request, at that failure's level (docs/decisions.md "Log levels of
// failures"); a success is `info`. An answer replayed for a repeated Idempotency-Key (an API route's, or an MCP tool's) says so
// (`idempotentReplay`).
import { LogController, type FastifyReply, type FastifyRequest } from 'fastify';
import { REPLAY_HEADER } from '../idempotency.ts';

export interface FailureLine {
  level: 'info' | 'warn' | 'error';
  fields: Record<string, unknown>;
  message: string;
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the error renderer: what the request's one log line says about its failure. */
    failure?: FailureLine;
    /**
     * Set by a face whose answer is not one HTTP response of one operation (/mcp: a tool's answer inside a JSON-RPC
     * response, perhaps streamed after the headers): the answer was an Idempotency-Key replay. An API route's replay
     * says so in its `Idempotent-Replayed` header, which the line reads.
     */
    idempotentReplay?: boolean;
  }
}

export class RequestLog extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    if (this.isLogDisabled(request)) return;
    const line = { req: request, res: reply, responseTime: reply.elapsedTime, ...((reply.getHeader(REPLAY_HEADER) === 'true' || request.idempotentReplay) && { idempotentReplay: true }) };
    if (error) {
      reply.log.error({ ...line, err: error }, 'request errored');
      return;
    }
    const failure = request.failure;
    if (failure) reply.log[failure.level]({ ...line, ...failure.fields }, failure.message);
    else reply.log.info(line, 'request completed');
  }
}
