// Turns anything thrown on a route into the body its clients expect: problem+json on API routes, the
// OAuth error body under /oauth/. Bad input is always a 4xx with a reason; only our own faults are
// 500s, and they never carry a stack trace or an internal message.
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isStorageUnavailable, STORAGE_RETRY_AFTER_S, storageFailureOf } from '../db/faults.ts';
import { ApiError, OAuthError, problemBody, type OAuthErrorCode } from '../errors.ts';

/** Maps Fastify's own client errors (parsing, limits, schema) onto our catalogue. */
export function toApiError(error: FastifyError): ApiError {
  if (error instanceof ApiError) return error;
  if (error.validation) {
    const where = error.validationContext ?? 'request';
    return new ApiError('invalid_input', {
      detail: `${where}${error.message.startsWith(where) ? error.message.slice(where.length) : ` ${error.message}`}`,
      extra: { errors: error.validation.map((v) => ({ path: `${where}${v.instancePath}`, message: v.message ?? 'is invalid' })) },
    });
  }
  switch (error.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ApiError('payload_too_large', { detail: 'the request body exceeds the size limit' });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return error.statusCode === 415
        ? new ApiError('unsupported_media_type', { detail: 'send the body as application/json' })
        : new ApiError('invalid_input', { detail: error.message });
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ApiError('invalid_input', { detail: 'the body is empty; send a JSON object (an empty one is {})' });
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new ApiError('invalid_input', { detail: 'the body is not valid JSON' });
  }
  if (error instanceof SyntaxError || (error.statusCode === 400 && /JSON/i.test(error.message))) {
    return new ApiError('invalid_input', { detail: 'the body is not valid JSON' });
  }
  if (error.statusCode === 415) return new ApiError('unsupported_media_type', { detail: error.message });
  if (error.statusCode === 413) return new ApiError('payload_too_large', { detail: error.message });
  if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
    return new ApiError('invalid_input', { detail: error.message, status: error.statusCode === 400 ? 400 : undefined });
  }
  if (isStorageUnavailable(error)) {
    return new ApiError('storage_unavailable', {
      detail: 'the database is unavailable or did not answer in time; retry shortly',
      headers: { 'retry-after': String(STORAGE_RETRY_AFTER_S) },
    });
  }
  return new ApiError('internal_error', { detail: 'an unexpected error occurred; it has been logged with this request id' });
}

const OAUTH_CODE_FOR: Partial<Record<string, OAuthErrorCode>> = {
  rate_limited: 'temporarily_unavailable',
  storage_unavailable: 'temporarily_unavailable',
  signing_configuration_required: 'temporarily_unavailable',
  internal_error: 'temporarily_unavailable',
};

export function toOAuthError(error: FastifyError): OAuthError {
  if (error instanceof OAuthError) return error;
  const api = toApiError(error);
  const code = OAUTH_CODE_FOR[api.code] ?? 'invalid_request';
  const status = code === 'temporarily_unavailable' ? (api.status === 429 ? 429 : 503) : api.status === 401 ? 401 : 400;
  return new OAuthError(api.status === 415 ? 415 : status, code, api.message, api.options.headers);
}

export function renderError(app: FastifyInstance, error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const isOAuth = request.url.startsWith('/oauth/');
  if (isOAuth) {
    const oauth = toOAuthError(error);
    logFailure(request, error, oauth.status);
    return reply
      .code(oauth.status)
      .headers({ 'cache-control': 'no-store', ...oauth.headers })
      .type('application/json')
      .send({ error: oauth.error, error_description: oauth.description });
  }
  const api = toApiError(error);
  logFailure(request, error, api.status);
  return reply
    .code(api.status)
    .headers(api.options.headers ?? {})
    .type('application/problem+json')
    .send(problemBody(app.gateway.config.baseUrl, api));
}

function logFailure(request: FastifyRequest, error: FastifyError, status: number): void {
  const storage = storageFailureOf(error)?.kind ?? (error instanceof ApiError && error.code === 'storage_unavailable' ? 'unreachable' : undefined);
  const fields = { code: 'storage_unavailable', status, reason: error.message };
  // An unreachable database is announced once by the outage tracker; each request it fails is routine.
  if (storage === 'unreachable') request.log.info(fields, 'request failed: database unavailable');
  // A live database that timed out a statement or a lock wait is a slow query or contention to look into.
  else if (storage === 'timeout') request.log.warn(fields, 'request failed: a database statement or lock wait timed out');
  else if (status >= 500) request.log.error({ err: error }, 'request failed');
  else request.log.info({ code: (error as { code?: string }).code, status }, error.message);
}
