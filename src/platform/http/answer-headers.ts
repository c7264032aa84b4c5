// The headers every answer carries, whoever writes it: a route, a refusal Fastify raises before any route, the
// front door while the app is not ready, or a refusal written on the socket for what Node's parser rejects.
import type { Config } from '../config.ts';

/** Two years, as browsers' preload lists ask; the host only (its subdomains are its operator's to decide). */
const STRICT_TRANSPORT_SECURITY = 'max-age=63072000';

/**
 * No sniffing, always; HSTS only on a live gateway served over https (in dev mode, HSTS for a host such as
 * localhost would hold every other local server to https).
 */
export function answerHeaders(config: Pick<Config, 'mode' | 'baseUrl'>): Readonly<Record<string, string>> {
  const strictTransport = config.mode === 'live' && config.baseUrl.startsWith('https:');
  return strictTransport ? { 'x-content-type-options': 'nosniff', 'strict-transport-security': STRICT_TRANSPORT_SECURITY } : { 'x-content-type-options': 'nosniff' };
}
