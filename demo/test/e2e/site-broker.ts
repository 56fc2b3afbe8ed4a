import { chmodSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  SITE_BROKER_FILES,
  certFingerprint,
  parseConfig,
  siteBrokerHooks,
  writeSiteBrokerFiles,
  type SiteAccountsConfig,
} from '@tobira/gateway';
import { startEmbeddedBroker, type Logger } from '@tobira/shared';
import { startMosquitto } from '@tobira/shared/testing';

/** The Mosquitto config a site is told to run (docs/gateway.md "Site broker logins"). */
export const SHIPPED_SITE_CONF = fileURLToPath(new URL('../../../gateway/deploy/mosquitto-site.conf', import.meta.url));

export interface SiteBroker {
  readonly kind: 'aedes' | 'mosquitto';
  /** The loopback plaintext listener the tests' locks use. */
  readonly url: string;
  /** Mosquitto's TLS listener (mqtts://127.0.0.1:port) and the site CA it serves a certificate of; null on aedes. */
  readonly tls: { readonly url: string; readonly caPem: string; readonly fingerprint: string } | null;
  stop(): Promise<void>;
}

/**
 * The shipped site config as a test runs it: only the listeners' ports
 * (startMosquitto gives the loopback plaintext one, on a free port; the TLS
 * one gets `tlsPort`, on loopback, as a LAN address is not ours to bind here)
 * and the file paths (the files `tobira-gateway site-broker-files` writes,
 * here in a temp dir) change; every other line is the shipped one.
 */
export function shippedSiteConfig(dir: string, tlsPort: number): string {
  const shipped = readFileSync(SHIPPED_SITE_CONF, 'utf8');
  return shipped
    .split('\n')
    .filter((l) => !/^listener 1883 127\.0\.0\.1$/.test(l))
    .map((l) => (l === 'listener 8883' ? `listener ${tlsPort} 127.0.0.1` : l))
    .map((l) => l.replace('/etc/mosquitto/tobira/', `${dir}/`))
    .join('\n');
}

/** A free loopback port. */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/**
 * A site broker that enforces lock logins: the embedded aedes with the
 * gateway's hooks, or a Mosquitto of its own started from the shipped
 * config with the password and ACL files generated from the same config.
 */
export async function startSiteBroker(
  kind: 'aedes' | 'mosquitto',
  config: SiteAccountsConfig,
  log: Logger,
  /** Who the Mosquitto files belong to (site-broker-files --owner); default: Mosquitto's user when root. */
  owner?: string,
): Promise<SiteBroker> {
  if (kind === 'aedes') {
    const b = await startEmbeddedBroker({ aedes: siteBrokerHooks(config, log) });
    return { kind, url: b.url, tls: null, stop: () => b.stop() };
  }
  const dir = mkdtempSync(join(tmpdir(), 'tobira-site-broker-'));
  // what `tobira-gateway site-broker-files` writes, owned by Mosquitto's user (it opens them after dropping root)
  const { files } = await writeSiteBrokerFiles(
    parseConfig({
      gatewayId: config.gatewayId,
      keyPairFile: join(dir, 'unused.json'),
      cloud: { url: 'mqtt://127.0.0.1:1', jwks: { keys: [{ kty: 'OKP', crv: 'Ed25519', x: 'x', kid: 'k' }] } },
      site: { url: 'mqtt://127.0.0.1:1', username: config.site.username, password: config.site.password },
      sqlitePath: join(dir, 'pki', 'unused.sqlite'),
      locks: config.locks.map((l) => ({ ...l, doorId: `door-${l.lockId}` })),
      credentialPepper: Buffer.alloc(32, 1).toString('base64url'),
    }),
    dir,
    owner,
    log,
  );
  // the test's folder is root's and 0700: Mosquitto's user must be able to enter it
  chmodSync(dir, 0o711);
  const tlsPort = await freePort();
  const m = await startMosquitto({ config: shippedSiteConfig(dir, tlsPort) }).catch((e: unknown) => {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  });
  const caPem = readFileSync(files.find((f) => f.endsWith(SITE_BROKER_FILES.caCert)) as string, 'utf8');
  return {
    kind,
    url: m.url,
    tls: { url: `mqtts://127.0.0.1:${tlsPort}`, caPem, fingerprint: certFingerprint(caPem) },
    async stop() {
      await m.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
