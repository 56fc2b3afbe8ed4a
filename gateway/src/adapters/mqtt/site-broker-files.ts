import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import type { Logger } from '@tobira/shared';
import type { GatewayConfig } from '../../config.js';
import { ensureSitePki } from '../tls/site-pki.js';
import { mosquittoSiteFiles } from './site-broker.js';

/**
 * `tobira-gateway site-broker-files`: everything the site Mosquitto reads,
 * owned by the user Mosquitto runs as. Mosquitto 2 starts as root, drops to
 * its own user (`mosquitto`; uid 1883 in the eclipse-mosquitto image) and
 * only then opens the password, ACL and TLS key files, so a root-owned 0600
 * file is unreadable to it; a world-readable one would leak the hashes and
 * the broker's key. Hence 0600 (0644 for the ACL and the certificates, which
 * hold nothing secret) and chown to that user.
 */
export const SITE_BROKER_FILES = {
  passwd: 'tobira-site.passwd',
  acl: 'tobira-site.acl',
  caCert: 'site-ca.crt',
  cert: 'site-broker.crt',
  key: 'site-broker.key',
} as const;

export class SiteBrokerFilesError extends Error {
  constructor(
    readonly code: 'SITE_BROKER_OWNER_UNKNOWN',
    message: string,
  ) {
    super(message);
    this.name = 'SiteBrokerFilesError';
  }
}

/** `name`, `uid` or `uid:gid`, resolved through /etc/passwd (`passwdFile`, a seam for tests). */
export function resolveOwner(owner: string, passwdFile = '/etc/passwd'): { uid: number; gid: number } {
  const m = /^(\d+)(?::(\d+))?$/.exec(owner);
  if (m !== null) return { uid: Number(m[1]), gid: Number(m[2] ?? m[1]) };
  const line = existsSync(passwdFile)
    ? readFileSync(passwdFile, 'utf8')
        .split('\n')
        .find((l) => l.split(':')[0] === owner)
    : undefined;
  if (line === undefined)
    throw new SiteBrokerFilesError(
      'SITE_BROKER_OWNER_UNKNOWN',
      `no user ${JSON.stringify(owner)} here: pass --owner uid:gid of the user Mosquitto runs as (1883:1883 in the eclipse-mosquitto image)`,
    );
  const f = line.split(':');
  return { uid: Number(f[2]), gid: Number(f[3]) };
}

/** The site PKI folder of a config: `tls.dir`, else `tls/` next to the database. */
export function pkiDirOf(config: GatewayConfig): string {
  return config.tls.dir ?? join(dirname(resolve(config.sqlitePath)), 'tls');
}

export async function writeSiteBrokerFiles(
  config: GatewayConfig,
  out: string,
  owner: string | undefined,
  log: Logger,
  now = Date.now(),
): Promise<{ files: string[]; owner: { uid: number; gid: number } | null }> {
  const root = process.getuid?.() === 0;
  // as root the files must go to Mosquitto's user; as another user they are that user's, who must be the one Mosquitto runs as
  const who = owner !== undefined ? resolveOwner(owner) : root ? resolveOwner('mosquitto') : null;
  const { passwd, acl } = mosquittoSiteFiles(config);
  const { pki } = await ensureSitePki({ dir: pkiDirOf(config), names: config.tls.names, now, log });
  mkdirSync(out, { recursive: true, mode: 0o755 });
  const files: [string, string, number][] = [
    [SITE_BROKER_FILES.passwd, passwd, 0o600],
    [SITE_BROKER_FILES.acl, acl, 0o644],
    [SITE_BROKER_FILES.caCert, pki.ca.certPem, 0o644],
    [SITE_BROKER_FILES.cert, pki.broker.certPem, 0o644],
    [SITE_BROKER_FILES.key, pki.broker.keyPem, 0o600],
  ];
  const written: string[] = [];
  for (const [name, text, mode] of files) {
    const file = join(out, name);
    // `mode` applies only when the file is created: tighten an existing one before the secret goes in
    if (existsSync(file)) chmodSync(file, mode);
    writeFileSync(file, text, { mode });
    chmodSync(file, mode);
    if (who !== null) chownSync(file, who.uid, who.gid);
    written.push(file);
  }
  return { files: written, owner: who };
}
