// A versioned resource's HTTP face (docs/decisions.md "A mandate's version is its ETag"): its 200 answers carry
// `ETag: "<version>"`, a strong tag naming the version in force, and a write honours `If-Match` with that tag, so
// a read, an edit and a write from two places never silently overwrite each other (RFC 9110 §13.1.1). The check
// itself is the operation's (its `ifVersion` input, which MCP takes as an argument); this module only speaks HTTP.
import type { FastifyRequest } from 'fastify';
import { ApiError } from '../errors.ts';
import { INTEGER_MAX } from '../schemas.ts';

/** The strong entity tag of a version. */
export function versionTag(version: number): string {
  return `"${version}"`;
}

/** The `ETag` header of an answer that shows `version`. */
export function versionHeaders(result: { version: number }): Record<string, string> {
  return { etag: versionTag(result.version) };
}

const ENTITY_TAG = /^\s*(W\/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*$/;
const VERSION = /^[1-9][0-9]{0,15}$/;

/**
 * The operation input of a request's `If-Match`: `{ ifVersion }` for one strong tag holding a version, nothing
 * for no header or `*` (a versioned resource that exists always matches it). Anything else is refused with 400
 * rather than compared: a weak tag never matches (strong comparison), and a list or a tag this API never gave
 * out can only be a client's mistake, better named than answered 412. `If-None-Match` is refused too.
 */
export function ifMatchInput(request: FastifyRequest): { ifVersion?: number } {
  const tagSource = whereTheTagIsRead(request);
  // A versioned resource always exists, so `If-None-Match: *` could only fail, and a write made only on a version
  // other than one named is no guard against a lost update: refused rather than ignored (found from outside).
  if (request.headers['if-none-match'] !== undefined) {
    throw new ApiError('invalid_input', {
      detail: `If-None-Match is not taken by this write (the resource always exists): send If-Match with the ETag ${tagSource} answered to make the change only on that version`,
    });
  }
  const header = request.headers['if-match'];
  if (header === undefined) return {};
  const text = Array.isArray(header) ? header.join(',') : header;
  if (text.trim() === '*') return {};
  const refuse = (why: string) =>
    new ApiError('invalid_input', { detail: `If-Match ${why}: send the ETag ${tagSource} answered (for example "3"), or leave it out` });
  const tag = ENTITY_TAG.exec(text);
  if (!tag) throw refuse(text.includes(',') ? 'names several entity tags; it must name one version' : 'is not an entity tag (a quoted version)');
  if (tag[1]) throw refuse('is a weak entity tag, which never matches (RFC 9110 §13.1.1)');
  const version = tag[2]!;
  if (!VERSION.test(version) || Number(version) > INTEGER_MAX) throw refuse(`names "${version}", which is not a version number`);
  return { ifVersion: Number(version) };
}

/** The GET whose ETag a write's If-Match names: the route's own resource, or the one its config names (app.ts `versioned`). */
function whereTheTagIsRead(request: FastifyRequest): string {
  const versioned = (request.routeOptions.config as { versioned?: boolean | { tagFrom: string } }).versioned;
  return typeof versioned === 'object' ? `GET ${versioned.tagFrom}` : 'a GET of this resource';
}
