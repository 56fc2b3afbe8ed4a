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
