import { X509Certificate } from 'node:crypto';
import type { IClientOptions } from 'mqtt';

/**
 * TLS on the site LAN (no secret in clear): the locks and the gateway reach the
 * site broker over mqtts, trusting exactly one CA, the site's, whose SHA-256
 * fingerprint a lock pins when it is paired (docs/gateway.md "Site TLS").
 * Plain mqtt:// is accepted only to a loopback address.
 */

/** 127.0.0.0/8, ::1 and localhost: traffic that never leaves the box. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127(?:\.\d{1,3}){3}$/.test(h) || h === '::ffff:127.0.0.1';
}

/** The fingerprint form locks are configured with: lower-case hex of SHA-256 over the certificate's DER, separators dropped. */
export function normalizeCaFingerprint(fp: string): string {
  return fp.replace(/[:\s]/g, '').toLowerCase();
}

/** A stable code for refusals of the site TLS setup. */
export class SiteTlsError extends Error {
  constructor(
    readonly code: 'SITE_CA_PIN_MISMATCH' | 'SITE_PLAINTEXT_NOT_LOOPBACK' | 'SITE_CA_MISSING',
    message: string,
  ) {
    super(message);
    this.name = 'SiteTlsError';
  }
}

/**
 * mqtt.js options that trust only `caPem`, after checking it is the CA the
 * lock was paired with (`pin`, when given): a swapped CA file is refused
 * before any connection, not trusted. For an mqtt:// URL the host must be
 * loopback and no options are added.
 */
export function siteTlsOptions(
  url: string,
  ca: { readonly caPem?: string | undefined; readonly pin?: string | undefined },
): IClientOptions {
  const u = new URL(url);
  const secure = u.protocol === 'mqtts:' || u.protocol === 'wss:';
  if (!secure) {
    if (!isLoopbackHost(u.hostname))
      throw new SiteTlsError(
        'SITE_PLAINTEXT_NOT_LOOPBACK',
        `${url}: plain MQTT is allowed only on loopback; use mqtts:// with the site CA`,
      );
    return {};
  }
  if (ca.caPem === undefined) throw new SiteTlsError('SITE_CA_MISSING', `${url}: mqtts needs the site CA certificate`);
  if (ca.pin !== undefined) {
    const have = normalizeCaFingerprint(new X509Certificate(ca.caPem).fingerprint256);
    if (have !== normalizeCaFingerprint(ca.pin))
      throw new SiteTlsError(
        'SITE_CA_PIN_MISMATCH',
        `the site CA certificate's fingerprint ${have} is not the pinned ${normalizeCaFingerprint(ca.pin)}`,
      );
  }
  return { ca: ca.caPem, rejectUnauthorized: true };
}
