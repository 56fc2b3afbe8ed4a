import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { mosquittoSiteFiles, siteBrokerHooks, type SiteAccountsConfig } from '@tobira/gateway';
import { startEmbeddedBroker, type Logger } from '@tobira/shared';
import { startMosquitto } from '@tobira/shared/testing';

/** The Mosquitto config a site is told to run (docs/gateway.md "Site broker logins"). */
export const SHIPPED_SITE_CONF = fileURLToPath(new URL('../../../gateway/deploy/mosquitto-site.conf', import.meta.url));

export interface SiteBroker {
  readonly kind: 'aedes' | 'mosquitto';
  readonly url: string;
  stop(): Promise<void>;
}

/**
 * The shipped site config as a test runs it: only the listener (startMosquitto
 * gives its own, on a free loopback port) and the two file paths (the files
 * `tobira-gateway site-broker-files` writes, here in a temp dir) change;
 * every other line is the shipped one.
 */
export function shippedSiteConfig(dir: string): string {
  const shipped = readFileSync(SHIPPED_SITE_CONF, 'utf8');
  return shipped
    .split('\n')
    .filter((l) => !l.startsWith('listener '))
    .map((l) => l.replace('/etc/mosquitto/tobira/', `${dir}/`))
    .join('\n');
}

/**
 * A site broker that enforces lock logins: the embedded aedes with the
 * gateway's hooks, or a Mosquitto of its own started from the shipped
 * config with the password and ACL files generated from the same config.
 */
export async function startSiteBroker(kind: 'aedes' | 'mosquitto', config: SiteAccountsConfig, log: Logger): Promise<SiteBroker> {
  if (kind === 'aedes') {
    const b = await startEmbeddedBroker({ aedes: siteBrokerHooks(config, log) });
    return { kind, url: b.url, stop: () => b.stop() };
  }
  const dir = mkdtempSync(join(tmpdir(), 'tobira-site-broker-'));
  const files = mosquittoSiteFiles(config);
  writeFileSync(join(dir, 'tobira-site.passwd'), files.passwd, { mode: 0o600 });
  writeFileSync(join(dir, 'tobira-site.acl'), files.acl);
  const m = await startMosquitto({ config: shippedSiteConfig(dir) });
  return {
    kind,
    url: m.url,
    async stop() {
      await m.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
