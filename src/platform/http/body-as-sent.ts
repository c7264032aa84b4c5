// A request body is read as it was sent, on every route that reads one (the API's JSON, the token endpoint's form,
// MCP's JSON-RPC): one with a Content-Encoding, or labelled with a charset other than UTF-8, is refused rather than
// read as UTF-8 text, which wrote an uncompressed body labelled `br`, read a latin1 one as UTF-8, and exchanged a
// token for a form labelled `br` (found from outside). Each route answers the reason in its own error form: a
// problem, an OAuth error, a JSON-RPC error, each with 415.
import type { IncomingHttpHeaders } from 'node:http';

/** Why the body would have to be decoded before it could be read (`text`: what it is, for the charset's sentence); undefined when it is read as sent. */
export function undecodedBodyProblem(headers: IncomingHttpHeaders, text: 'JSON' | 'form'): string | undefined {
  const encoding = headers['content-encoding'];
  if (encoding !== undefined && encoding.trim().toLowerCase() !== 'identity') {
    return `request bodies are read as sent, not decoded: send it without Content-Encoding (${encoding})`;
  }
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(headers['content-type'] ?? '')?.[1]?.toLowerCase();
  if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
    return text === 'JSON'
      ? `JSON is UTF-8 (RFC 8259 §8.1): charset=${charset} is not taken`
      : `a form body is UTF-8 (WHATWG URL, application/x-www-form-urlencoded): charset=${charset} is not taken`;
  }
  return undefined;
}

/** Decodes UTF-8, refusing bytes that are not (a leading byte order mark is dropped, as JSON parsers may). */
const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true });

/** A body's text when its bytes are UTF-8, undefined when they are not: JSON is UTF-8, so such a body is refused, never read with U+FFFD in it. */
export function utf8Text(body: Uint8Array): string | undefined {
  try {
    return STRICT_UTF8.decode(body);
  } catch {
    return undefined;
  }
}
