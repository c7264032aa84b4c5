/**
 * A JSON-RPC 2.0 error response (§5.1), as text: the body of every refusal a JSON-RPC route gives, whether the
 * route's handler or the platform (a body over the size limit) refuses it. An id that is not a string or a number,
 * or a message whose id could not be read, answers with id null.
 */
export function jsonRpcError(id: unknown, code: number, message: string): string {
  return JSON.stringify({ jsonrpc: '2.0', id: typeof id === 'string' || typeof id === 'number' ? id : null, error: { code, message } });
}
