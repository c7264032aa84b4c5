// A throw-away self-signed certificate for local TLS servers (the DoH resolver, webhook receivers).
// Tests pass its PEM as the extra trusted CA, so nothing else is trusted less.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

export interface TestCertificate {
  certPem: string;
  keyPem: string;
  certPath: string;
  keyPath: string;
  remove(): void;
}

/** A P-256 certificate valid for the given DNS names and IP addresses (subjectAltName), made with the openssl CLI. */
export function makeTestCertificate(names: { dns?: string[]; ip?: string[] }): TestCertificate {
  const dir = mkdtempSync(path.join(tmpdir(), 'acg-cert-'));
  const certPath = path.join(dir, 'cert.pem');
  const keyPath = path.join(dir, 'key.pem');
  const altNames = [...(names.dns ?? []).map((n) => `DNS:${n}`), ...(names.ip ?? []).map((ip) => `IP:${ip}`)].join(',');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
    '-keyout', keyPath, '-out', certPath, '-days', '2', '-subj', '/CN=acg-test',
    '-addext', `subjectAltName=${altNames}`,
  ], { stdio: 'ignore' });
  return {
    certPem: readFileSync(certPath, 'utf8'),
    keyPem: readFileSync(keyPath, 'utf8'),
    certPath,
    keyPath,
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
