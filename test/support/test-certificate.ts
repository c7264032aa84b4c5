// Throw-away certificates for local TLS servers (the DoH resolver, webhook receivers, a PostgreSQL over TLS).
// Tests pass a self-signed certificate's PEM as the extra trusted CA, so nothing else is trusted less; or make a
// test CA and certificates it issues, as a deployment's servers have.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

export interface TestCertificate {
  certPem: string;
  keyPem: string;
  certPath: string;
  keyPath: string;
  remove(): void;
}

const P256 = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];

function made(dir: string, certPath: string, keyPath: string): TestCertificate {
  return {
    certPem: readFileSync(certPath, 'utf8'),
    keyPem: readFileSync(keyPath, 'utf8'),
    certPath,
    keyPath,
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** A test certificate authority (self-signed, CA:TRUE): pass it as `issuer` to makeTestCertificate. */
export function makeTestCa(name = 'acg-test-ca'): TestCertificate {
  const dir = mkdtempSync(path.join(tmpdir(), 'acg-ca-'));
  const certPath = path.join(dir, 'ca.pem');
  const keyPath = path.join(dir, 'ca-key.pem');
  execFileSync('openssl', ['req', '-x509', ...P256, '-keyout', keyPath, '-out', certPath, '-days', '2', '-subj', `/CN=${name}`], { stdio: 'ignore' });
  return made(dir, certPath, keyPath);
}

/**
 * A P-256 certificate valid for the given DNS names and IP addresses (subjectAltName), made with the openssl CLI:
 * self-signed, or issued by `issuer` (makeTestCa).
 */
export function makeTestCertificate(names: { dns?: string[]; ip?: string[] }, options: { issuer?: TestCertificate } = {}): TestCertificate {
  const dir = mkdtempSync(path.join(tmpdir(), 'acg-cert-'));
  const certPath = path.join(dir, 'cert.pem');
  const keyPath = path.join(dir, 'key.pem');
  const altNames = [...(names.dns ?? []).map((n) => `DNS:${n}`), ...(names.ip ?? []).map((ip) => `IP:${ip}`)].join(',');
  if (!options.issuer) {
    execFileSync('openssl', [
      'req', '-x509', ...P256, '-keyout', keyPath, '-out', certPath, '-days', '2', '-subj', '/CN=acg-test',
      '-addext', `subjectAltName=${altNames}`,
    ], { stdio: 'ignore' });
    return made(dir, certPath, keyPath);
  }
  // A request, then the issuer's signature over it with the leaf's extensions (`x509 -req`, also in OpenSSL 1.1).
  const requestPath = path.join(dir, 'request.pem');
  const extensionsPath = path.join(dir, 'extensions.cnf');
  writeFileSync(extensionsPath, `basicConstraints = critical, CA:FALSE\nsubjectAltName = ${altNames}\n`);
  execFileSync('openssl', ['req', '-new', ...P256, '-keyout', keyPath, '-out', requestPath, '-subj', '/CN=acg-test'], { stdio: 'ignore' });
  execFileSync('openssl', [
    'x509', '-req', '-in', requestPath, '-CA', options.issuer.certPath, '-CAkey', options.issuer.keyPath, '-set_serial', `0x${Date.now().toString(16)}`,
    '-days', '2', '-extfile', extensionsPath, '-out', certPath,
  ], { stdio: 'ignore' });
  return made(dir, certPath, keyPath);
}
