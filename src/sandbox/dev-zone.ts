// The dev DNS zone: TXT records a developer publishes (`acg dev dns publish`), answered over the real
// DNS-over-HTTPS wire format (RFC 8484), so that dev mode verifies merchant domains through the same
// DoH client as live mode, with only the resolver swapped. Authoritative for every name: a name without
// records is NXDOMAIN. Dev mode only; live mode never builds it.
import dnsPacket from 'dns-packet';
import type { DecodedPacket, Question } from 'dns-packet';
import type { Queryable } from '../platform/db/database.ts';
import { ApiError, memberRefusal } from '../platform/errors.ts';
import * as store from './store.ts';

/** Enough for every merchant of a dev machine; a limit so a runaway script cannot fill the database. */
export const DEV_ZONE_RECORDS_MAX = 10_000;
/** A TXT value is split into 255-byte strings on the wire; this is far above any verification token. */
export const DEV_TXT_VALUE_BYTES_MAX = 1024;
/** Records are answered with TTL 0, so nothing caches a value that was just published. */
const TTL_S = 0;
const NXDOMAIN = 3;
const FORMERR = 1;

export interface TxtRecord {
  type: 'TXT';
  name: string;
  value: string;
}

/** Lower case, no trailing dot; refuses what is not a DNS name (the same rule the DoH client applies). */
export function canonicalDnsName(name: string): string | undefined {
  const canonical = name.toLowerCase().replace(/\.$/, '');
  const labels = canonical.split('.');
  const fits = canonical.length > 0 && canonical.length <= 253 && labels.every((label) => /^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$/.test(label));
  return fits ? canonical : undefined;
}

export async function publish(tx: Queryable, name: string, value: string, nowS: number): Promise<TxtRecord> {
  const canonical = canonicalDnsName(name);
  if (!canonical) throw memberRefusal('name', `${JSON.stringify(name)} is not a DNS name (letters, digits, - and _ in dot-separated labels of 1–63 characters)`);
  if (Buffer.byteLength(value, 'utf8') > DEV_TXT_VALUE_BYTES_MAX) {
    throw memberRefusal('value', `is at most ${DEV_TXT_VALUE_BYTES_MAX} bytes (a TXT value)`);
  }
  if ((await store.countRecords(tx)) >= DEV_ZONE_RECORDS_MAX) {
    throw new ApiError('conflict', { detail: `the dev zone holds at most ${DEV_ZONE_RECORDS_MAX} records` });
  }
  await store.insertRecord(tx, canonical, value, nowS);
  return { type: 'TXT', name: canonical, value };
}

/** One TXT value as DNS character-strings of at most 255 bytes each (RFC 1035 §3.3.14). */
function characterStrings(value: string): Buffer[] {
  const bytes = Buffer.from(value, 'utf8');
  const strings: Buffer[] = [];
  for (let offset = 0; offset < bytes.length; offset += 255) strings.push(bytes.subarray(offset, offset + 255));
  return strings.length > 0 ? strings : [Buffer.alloc(0)];
}

function response(query: DecodedPacket, rcode: number, answers: dnsPacket.Answer[]): Buffer {
  const recursionDesired = (query.flags ?? 0) & dnsPacket.RECURSION_DESIRED;
  return dnsPacket.encode({
    type: 'response',
    id: query.id ?? 0,
    flags: dnsPacket.AUTHORITATIVE_ANSWER | recursionDesired | rcode,
    questions: query.questions ?? [],
    answers,
  });
}

/**
 * Answers one wire-format DNS query. A query that is not a DNS message is `undefined` (the route answers
 * HTTP 400, as RFC 8484 §4.2.1 asks); anything but one question is FORMERR.
 */
export async function answer(db: Queryable, message: Buffer): Promise<Buffer | undefined> {
  let query: DecodedPacket;
  try {
    query = dnsPacket.decode(message);
  } catch {
    return undefined;
  }
  const question: Question | undefined = query.questions?.[0];
  if (query.type !== 'query' || query.questions?.length !== 1 || question === undefined) return response(query, FORMERR, []);
  const name = canonicalDnsName(question.name);
  const values = name ? await store.valuesAt(db, name) : [];
  if (values.length === 0) return response(query, NXDOMAIN, []);
  const answers: dnsPacket.Answer[] =
    question.type === 'TXT' && (question.class ?? 'IN') === 'IN'
      ? values.map((value) => ({ type: 'TXT', class: 'IN', name: question.name, ttl: TTL_S, data: characterStrings(value) }))
      : [];
  return response(query, 0, answers);
}
