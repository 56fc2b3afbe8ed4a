export { CONFIG_CODES, ConfigError, parseConfig, type CloudConfig, type ConfigCode } from './config.js';
export { CRASH_POINTS, SimulatedCrash, type CrashPoint, type CrashHook } from './app/crash.js';
export type { KeyResult, IssueKeyInput, RevokeKeyInput } from './app/keys.js';
export type { EntryKey } from './domain/keys.js';
export { KEY_TRANSITIONS, KEY_NOOPS, KEY_STATUSES, type KeyStatus } from './domain/key-states.js';
export { buildApp } from './http/app.js';
export { buildCloud, createCloud, startAdminApi, type AdminApi, type AdminApiOptions, type Cloud, type CloudDeps } from './cloud.js';
export type { CloudVerbs, VerbOptions } from './app/port.js';
export { DEFAULT_API_CONFIG, type ApiConfig, type ApiDeps } from './http/context.js';
export { createApiToken, installApiToken, revokeApiToken, rotateApiToken } from './adapters/db/tokens.js';
export type { Role, TokenLifetimeOptions } from './domain/tokens.js';
export { API_CODES, type ApiCode } from './http/codes.js';

export { BrokerUnavailable, unmanagedBrokerAccounts, type BrokerAccounts, type BrokerCredentials } from './app/broker-accounts.js';
export type { Db, Tx, Queryable } from './adapters/db/db.js';
export * from './adapters/broker/index.js';
