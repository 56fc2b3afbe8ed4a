export { createGateway, type Gateway, type GatewayDeps } from './gateway.js';
export { GatewayConfig, loadConfig, parseConfig, type GatewayConfigInput } from './config.js';
export { CRASH_POINTS, type CrashPoint, crashHookFromEnv } from './app/context.js';
export { decide } from './domain/decide.js';
export { openDatabase, migrate } from './adapters/sqlite/db.js';
export { GatewayStore } from './adapters/sqlite/store.js';
export {
  LOCK_DOWNLINK_CHANNELS,
  LOCK_UPLINK_CHANNELS,
  mosquittoPasswordHash,
  mosquittoSiteFiles,
  siteAcl,
  siteBrokerHooks,
  siteLogins,
  type SiteAccount,
  type SiteAccountsConfig,
} from './adapters/mqtt/site-broker.js';
export { ensureSitePki, certFingerprint, PKI_FILES, type SitePki, type PemPair } from './adapters/tls/site-pki.js';
export { writeSiteBrokerFiles, SITE_BROKER_FILES, resolveOwner } from './adapters/mqtt/site-broker-files.js';
export { enforceModes, FileModeError } from './adapters/file-modes.js';
