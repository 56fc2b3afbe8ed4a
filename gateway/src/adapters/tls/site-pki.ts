// @peculiar/x509 resolves its services through tsyringe, which needs the Reflect metadata API loaded first.
import 'reflect-metadata';
import { X509Certificate as NodeX509, createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';
import type { Logger } from '@tobira/shared';

/**
 * The site's own PKI (no secret in clear; docs/gateway.md "Site TLS"): a site CA
 * made at the gateway's first start, and two server certificates it signs,
 * one for the site broker (the locks connect to it) and one for the staff
 * UI. A lock pins the CA's SHA-256 fingerprint when it is paired, so the CA
 * lives as long as the site (20 years) and only the server certificates are
 * renewed: at every start and once a day, `RENEW_BEFORE_DAYS` before they
 * expire, or when the names they must carry changed. Renewing a server
 * certificate needs nothing from the locks: it is signed by the CA they pin.
 *
 * P-256 ECDSA keys (Node's WebCrypto makes them): every TLS stack a lock or
 * a browser has speaks it, Ed25519 certificates are not yet universal in
 * browsers. Private keys are written 0600 in a 0700 folder.
 */
export const CA_VALIDITY_DAYS = 20 * 365;
export const SERVER_VALIDITY_DAYS = 397;
export const RENEW_BEFORE_DAYS = 30;
/** Below this the start logs a warning: replacing the CA means re-pairing every lock (docs/operations.md). */
export const CA_WARN_BEFORE_DAYS = 365;

const DAY = 86_400_000;
const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

x509.cryptoProvider.set(globalThis.crypto);

export interface PemPair {
  readonly keyPem: string;
  readonly certPem: string;
  /** SHA-256 of the certificate's DER, as `AB:CD:...` (what browsers and `openssl x509 -fingerprint -sha256` show). */
  readonly fingerprint: string;
  readonly notAfter: number;
  readonly keyFile: string;
  readonly certFile: string;
}

export interface SitePki {
  readonly dir: string;
  readonly ca: PemPair;
  readonly broker: PemPair;
  readonly https: PemPair;
}

export const PKI_FILES = {
  caKey: 'site-ca.key',
  caCert: 'site-ca.crt',
  brokerKey: 'site-broker.key',
  brokerCert: 'site-broker.crt',
  httpsKey: 'staff-https.key',
  httpsCert: 'staff-https.crt',
} as const;

/** SHA-256 fingerprint of a PEM certificate, upper-case hex pairs joined by ':'. */
export function certFingerprint(certPem: string): string {
  return new NodeX509(certPem).fingerprint256;
}

/** The same fingerprint without separators, lower case (what firmware-sim's --site-ca-fingerprint takes too). */
export function normalizeFingerprint(fp: string): string {
  return fp.replace(/:/g, '').toLowerCase();
}

function pem(label: string, der: ArrayBuffer): string {
  const b64 = Buffer.from(der).toString('base64');
  return `-----BEGIN ${label}-----\n${b64.replace(/.{1,64}/g, '$&\n')}-----END ${label}-----\n`;
}

function derOf(p: string): Buffer {
  return Buffer.from(p.replace(/-----[^-]+-----/g, '').replace(/\s+/g, ''), 'base64');
}

/** Writes a file readable by its owner only, through a temporary file so a crash never leaves half a key. */
function writePrivate(file: string, text: string): void {
  const tmp = `${file}.${randomBytes(4).toString('hex')}.tmp`;
  writeFileSync(tmp, text, { mode: 0o600 });
  renameSync(tmp, file);
}

type Keys = Parameters<typeof x509.X509CertificateGenerator.createSelfSigned>[0]['keys'];
type SigningKey = Keys['privateKey'];

// x509's own handle on the provider set above: its types are the ones x509 takes
const subtle = () => x509.cryptoProvider.get().subtle;

async function newKeys(): Promise<Keys> {
  return subtle().generateKey(ALG, true, ['sign', 'verify']);
}

async function importPrivate(keyPem: string): Promise<SigningKey> {
  return subtle().importKey('pkcs8', derOf(keyPem), ALG, false, ['sign']);
}

async function keyPem(k: Keys['privateKey']): Promise<string> {
  return pem('PRIVATE KEY', await subtle().exportKey('pkcs8', k));
}

function serial(): string {
  // positive (high bit clear) 16 random bytes
  const b = randomBytes(16);
  b[0] = b[0]! & 0x7f;
  return b.toString('hex');
}

function pairOf(dir: string, keyName: string, certName: string, keyText: string, certText: string): PemPair {
  const c = new NodeX509(certText);
  return {
    keyPem: keyText,
    certPem: certText,
    fingerprint: c.fingerprint256,
    notAfter: Date.parse(c.validTo),
    keyFile: join(dir, keyName),
    certFile: join(dir, certName),
  };
}

function readPair(dir: string, keyName: string, certName: string): PemPair | null {
  const kf = join(dir, keyName);
  const cf = join(dir, certName);
  if (!existsSync(kf) || !existsSync(cf)) return null;
  return pairOf(dir, keyName, certName, readFileSync(kf, 'utf8'), readFileSync(cf, 'utf8'));
}

/** The names a server certificate carries: always the loopback names, plus the configured LAN names and addresses. */
export function serverNames(extra: readonly string[]): string[] {
  return [...new Set(['localhost', '127.0.0.1', '::1', ...extra.map((n) => n.toLowerCase())])];
}

/** One spelling per name: lower case, and an IPv6 address compressed (Node prints a certificate's as 0:0:0:0:0:0:0:1). */
function canonical(name: string): string {
  const n = name.toLowerCase();
  return isIP(n) === 6 ? new URL(`http://[${n}]`).hostname.slice(1, -1) : n;
}

function sanOf(certPem: string): string[] {
  const alt = new NodeX509(certPem).subjectAltName ?? '';
  return alt
    .split(', ')
    .map((s) => canonical(s.replace(/^(DNS|IP Address):/, '')))
    .filter((s) => s !== '');
}

async function makeCa(dir: string, now: number): Promise<PemPair> {
  const keys = await newKeys();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: `CN=Tobira site CA ${randomBytes(4).toString('hex')}`,
    notBefore: new Date(now - DAY),
    notAfter: new Date(now + CA_VALIDITY_DAYS * DAY),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  const k = await keyPem(keys.privateKey);
  const c = cert.toString('pem') + '\n';
  // the certificate first: a key without its certificate would be made again, a certificate without its key never is
  writePrivate(join(dir, PKI_FILES.caKey), k);
  writePrivate(join(dir, PKI_FILES.caCert), c);
  return pairOf(dir, PKI_FILES.caKey, PKI_FILES.caCert, k, c);
}

async function makeServer(dir: string, ca: PemPair, names: readonly string[], cn: string, keyName: string, certName: string, now: number) {
  const keys = await newKeys();
  const caCert = new x509.X509Certificate(ca.certPem);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: `CN=${cn}`,
    issuer: caCert.subject,
    notBefore: new Date(now - DAY),
    notAfter: new Date(Math.min(now + SERVER_VALIDITY_DAYS * DAY, ca.notAfter)),
    signingKey: await importPrivate(ca.keyPem),
    publicKey: keys.publicKey,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth], false),
      new x509.SubjectAlternativeNameExtension(names.map((n) => (isIP(n) ? { type: 'ip', value: n } : { type: 'dns', value: n }))),
      await x509.AuthorityKeyIdentifierExtension.create(caCert),
    ],
  });
  const k = await keyPem(keys.privateKey);
  const c = cert.toString('pem') + '\n';
  writePrivate(join(dir, keyName), k);
  writePrivate(join(dir, certName), c);
  return pairOf(dir, keyName, certName, k, c);
}

function needsRenewal(p: PemPair | null, ca: PemPair, names: readonly string[], now: number): string | null {
  if (p === null) return 'missing';
  if (p.notAfter - now < RENEW_BEFORE_DAYS * DAY) return 'expiring';
  const have = new Set(sanOf(p.certPem));
  if (names.some((n) => !have.has(canonical(n)))) return 'names changed';
  if (!new NodeX509(p.certPem).checkIssued(new NodeX509(ca.certPem))) return 'not signed by the site CA';
  return null;
}

/**
 * Loads the site PKI from `dir`, making what is missing and renewing a
 * server certificate that expires within RENEW_BEFORE_DAYS or lacks one of
 * `names`. Returns it and what was (re)made. Never replaces an existing CA.
 */
export async function ensureSitePki(opts: {
  readonly dir: string;
  readonly names: readonly string[];
  readonly now: number;
  readonly log: Logger;
}): Promise<{ pki: SitePki; made: string[] }> {
  const { dir, now, log } = opts;
  const names = serverNames(opts.names);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const made: string[] = [];
  let ca = readPair(dir, PKI_FILES.caKey, PKI_FILES.caCert);
  if (ca === null) {
    if (existsSync(join(dir, PKI_FILES.caCert)))
      // a CA certificate without its key: the locks pin it, so a silently new CA would cut them all off
      throw Object.assign(new Error(`${join(dir, PKI_FILES.caKey)} is missing but the site CA certificate exists; restore the key`), {
        code: 'SITE_CA_KEY_MISSING',
      });
    ca = await makeCa(dir, now);
    made.push('ca');
    log.warn({ fingerprint: ca.fingerprint, file: ca.certFile }, 'site CA made: pair the locks with this fingerprint');
  }
  if (ca.notAfter - now < CA_WARN_BEFORE_DAYS * DAY)
    log.warn({ notAfter: new Date(ca.notAfter).toISOString() }, 'site CA expires within a year: plan a re-pairing (docs/operations.md)');
  const serverPair = async (kind: 'broker' | 'https', keyName: string, certName: string, cn: string): Promise<PemPair> => {
    const have = readPair(dir, keyName, certName);
    const why = needsRenewal(have, ca, names, now);
    if (why === null && have !== null) return have;
    const p = await makeServer(dir, ca, names, cn, keyName, certName, now);
    made.push(kind);
    log.info({ kind, reason: why, fingerprint: p.fingerprint, notAfter: new Date(p.notAfter).toISOString() }, 'site certificate made');
    return p;
  };
  const broker = await serverPair('broker', PKI_FILES.brokerKey, PKI_FILES.brokerCert, 'Tobira site broker');
  const https = await serverPair('https', PKI_FILES.httpsKey, PKI_FILES.httpsCert, 'Tobira staff UI');
  return { pki: { dir, ca, broker, https }, made };
}

/** Fingerprint of a CA certificate in the form a lock is configured with (lower-case hex, no separators). */
export function pinOf(certPem: string): string {
  return createHash('sha256').update(derOf(certPem)).digest('hex');
}
