import { X509Certificate } from 'node:crypto';
import { parse as legacyParse } from 'node:url';
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

/** A broker URL refused before any connection, with a stable code. */
export class BrokerUrlError extends Error {
  constructor(
    readonly code: 'BROKER_URL_INVALID' | 'BROKER_URL_AMBIGUOUS',
    message: string,
  ) {
    super(message);
    this.name = 'BrokerUrlError';
  }
}

const bare = (host: string | null) => (host ?? '').replace(/^\[|\]$/g, '').toLowerCase();

/**
 * A broker URL as every part reads it. mqtt.js connects to the host Node's legacy `url.parse` finds, while
 * the checks here (loopback only for plaintext, the TLS options) read the WHATWG `URL`: the two disagree on
 * a backslash or userinfo (`mqtt://lan-host:1883\@127.0.0.1:1885` is loopback to one, a LAN host to the
 * other), which would send a login in clear past the loopback check. So a URL with userinfo, a backslash or
 * whitespace is refused (credentials are the config's own fields), and so is one the two parsers read as
 * different hosts, ports or schemes. `connectMqtt` checks every URL it is given this way.
 */
export function parseBrokerUrl(raw: string): URL {
  const norm = raw.replace(/^tcp:/, 'mqtt:');
  let u: URL;
  try {
    u = new URL(norm);
  } catch {
    throw new BrokerUrlError('BROKER_URL_INVALID', `${JSON.stringify(raw)} is not a URL`);
  }
  if (/[\s\\@]/.test(raw) || u.username !== '' || u.password !== '')
    throw new BrokerUrlError(
      'BROKER_URL_AMBIGUOUS',
      'a broker URL carries no userinfo, backslash or whitespace (give the login in the config, not the URL)',
    );
  const l = legacyParse(norm);
  if (l.protocol !== u.protocol || bare(l.hostname) !== bare(u.hostname) || (l.port ?? '') !== u.port)
    throw new BrokerUrlError('BROKER_URL_AMBIGUOUS', `${u.href} reads as ${l.protocol ?? ''}//${l.host ?? ''} to the MQTT client`);
  return u;
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
  const u = parseBrokerUrl(url);
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
