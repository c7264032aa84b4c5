// An owner attaches an IMAP account to one of their agents; the `mail` service reads through it (this is its
// connection store: the pipeline asks it for the executing agent's account). The password is sealed with the
// secret box (associated data = the agent id, so a sealed password copied onto another agent's row does not
// open) and never leaves the gateway again. The inbox allowlist is the agent's own `inboxAllowlist`, set with
// PATCH /v1/owner/agents/{id}.
import { X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import type { Actor } from '../agents/acting.ts';
import type { AgentService } from '../agents/service.ts';
import type { AgentRow } from '../agents/service.ts';
import type { Queryable, Tx } from '../platform/db/database.ts';
import { ApiError, memberRefusal } from '../platform/errors.ts';
import type { Gateway } from '../platform/gateway.ts';
import { normaliseDomain } from '../platform/hostnames.ts';
import { isPublicAddress } from '../platform/outbound.ts';
import { openSecret, sealSecret, SecretBoxError, type SecretBoxKey } from '../platform/secret-box.ts';
import { mailService, type MailConnectionSettings, type MailTlsMode } from '../connectors/mail.ts';
import type { ConnectionStore } from './pipeline.ts';
import * as store from './store.ts';

/** What the owner submits: the connector's own connection settings (the allowlist lives on the agent). */

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----/g;

/**
 * Whether `text` is one or more PEM certificates and nothing else but the white space between them: what TLS trusts
 * for the connection (a chain or a bundle works). `X509Certificate` reads the first block and ignores what follows,
 * so a bundle passed, and so did a certificate followed by any text (found from outside: the refusal said "one").
 */
function isPemCertificates(text: string): boolean {
  const blocks = text.match(PEM_CERTIFICATE) ?? [];
  if (blocks.length === 0 || text.replace(PEM_CERTIFICATE, '').trim() !== '') return false;
  try {
    for (const block of blocks) new X509Certificate(block);
    return true;
  } catch {
    return false;
  }
}

export type MailConnectorSettings = MailConnectionSettings;

/** The connector as the owner reads it back: everything but the password. */
export interface MailConnectorView {
  agentId: string;
  host: string;
  port: number;
  tls: MailTlsMode;
  username: string;
  ca: string | null;
  /** The agent's inbox allowlist, for convenience; change it with PATCH /v1/owner/agents/{id}. */
  inboxAllowlist: string[];
  createdAt: number;
  updatedAt: number;
}

function view(row: store.MailConnectorRow, agent: AgentRow): MailConnectorView {
  return {
    agentId: row.agent_id,
    host: row.host,
    port: row.port,
    tls: row.tls,
    username: row.username,
    ca: row.ca_pem,
    inboxAllowlist: agent.inbox_allowlist,
    createdAt: Number(row.created_at_s),
    updatedAt: Number(row.updated_at_s),
  };
}

/** The mail connector store: the `mail` service's stored connections (table `mail_connectors`). */
/**
 * The host as a resolver reads it, so that the door sees what an execution would connect to: IPv4 in any
 * inet_aton spelling (`127.1`, `0177.0.0.1`, `2130706433`, `0x7f000001`) as its dotted quad (the WHATWG URL
 * parser's reading for an http URL, which parses hosts as a resolver does), IPv6 without brackets, lower case, without a trailing dot (`localhost.`).
 */
function canonicalHost(host: string): string {
  const bracketed = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  let hostname = host.toLowerCase();
  try {
    hostname = new URL(`http://${bracketed}`).hostname;
  } catch {
    // Not a host a URL can carry: judged as written (the execution refuses what does not resolve).
  }
  return hostname.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '');
}

export class MailConnectorService implements ConnectionStore {
  readonly serviceId = mailService.id;

  constructor(
    private readonly gateway: Gateway,
    private readonly identity: AgentService,
    private readonly boxKey: SecretBoxKey | undefined,
  ) {}

  /** Refuses, at the door, settings the connector would refuse on every execution (a private host: `canonicalHost`). */
  private check(settings: MailConnectorSettings): void {
    const allowPrivate = this.gateway.config.allowPrivateNetworkTargets;
    if (settings.tls === 'none' && !allowPrivate) {
      throw memberRefusal('tls', '"none" (cleartext IMAP) would send the password in the clear; use "implicit" (port 993) or "starttls"');
    }
    const host = canonicalHost(settings.host);
    // A colon belongs only to an IPv6 literal: "name:port" or "1.2.3.4:5" never resolves (the port is its own member).
    if (host.includes(':') && isIP(host) !== 6) {
      throw memberRefusal('host', `"${settings.host}" is neither a DNS name nor an IP address; give the port as \`port\``);
    }
    const privateHost = (isIP(host) !== 0 && !isPublicAddress(host)) || host === 'localhost' || host.endsWith('.localhost');
    if (privateHost && !allowPrivate) {
      throw memberRefusal('host', `"${settings.host}" is not a public address; the gateway only connects to public mail servers`);
    }
    // A name is judged by the rule a merchant's domain and a webhook's host keep: no special-use or single-label
    // names (found from outside: `mail.internal` was stored, then refused at every execution as it resolved).
    const name = isIP(host) === 0 && !allowPrivate ? normaliseDomain(host) : undefined;
    if (name && !name.ok) {
      throw memberRefusal('host', `"${settings.host}" is not a public DNS name (${name.reason}); the gateway only connects to public mail servers`);
    }
    if (settings.ca !== undefined && !isPemCertificates(settings.ca)) {
      throw memberRefusal('ca', 'must be PEM certificates (-----BEGIN CERTIFICATE----- …), one or more, and nothing else');
    }
  }

  async set(tx: Tx, principal: Actor, agentId: string, settings: MailConnectorSettings): Promise<MailConnectorView> {
    if (!this.boxKey) {
      throw new ApiError('runtime_configuration_required', { detail: 'mail passwords cannot be stored: ACG_SECRET_BOX_KEY is not configured' });
    }
    const agent = await this.identity.lockAgentFor(tx, principal, agentId);
    this.check(settings);
    const nowS = BigInt(this.gateway.clock.nowS());
    const row = await store.upsertMailConnector(tx, {
      agent_id: agent.id,
      host: settings.host,
      port: settings.port,
      tls: settings.tls,
      username: settings.username,
      password_sealed: sealSecret(this.boxKey, settings.password, agent.id),
      ca_pem: settings.ca ?? null,
      created_at_s: nowS,
      updated_at_s: nowS,
    });
    return view(row, agent);
  }

  async get(db: Queryable, principal: Actor, agentId: string): Promise<MailConnectorView> {
    const agent = await this.identity.agentFor(db, principal, agentId);
    const row = await store.findMailConnector(db, agent.id);
    if (!row) throw new ApiError('not_found', { detail: `agent ${agentId} has no mail connector` });
    return view(row, agent);
  }

  /** Removes the connector; removing one that is not there is not an error (DELETE is idempotent). */
  async remove(tx: Tx, principal: Actor, agentId: string): Promise<void> {
    const agent = await this.identity.lockAgentFor(tx, principal, agentId);
    await store.deleteMailConnector(tx, agent.id);
  }

  /**
   * The agent's IMAP account with its password opened, for one execution of the `mail` service; null when
   * it has none. A stored one that cannot be opened refuses the execution, saying why (instead of "no connector").
   */
  async forExecution(db: Queryable, agentId: string): Promise<MailConnectionSettings | null> {
    const row = await store.findMailConnector(db, agentId);
    if (!row) return null;
    if (!this.boxKey) {
      throw new ApiError('runtime_configuration_required', { detail: "the agent's mail password cannot be opened: ACG_SECRET_BOX_KEY is not configured" });
    }
    let password: string;
    try {
      password = openSecret(this.boxKey, row.password_sealed, agentId);
    } catch (error) {
      if (!(error instanceof SecretBoxError)) throw error;
      this.gateway.log.warn({ agentId }, 'stored mail password does not open with the configured secret box key');
      throw new ApiError('connector_not_configured', {
        detail: "the agent's stored mail password cannot be opened with the gateway's current key; the owner must set the mail connector again",
      });
    }
    return { host: row.host, port: row.port, tls: row.tls, username: row.username, password, ...(row.ca_pem ? { ca: row.ca_pem } : {}) };
  }
}
