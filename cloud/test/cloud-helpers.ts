import { ManualClock, generateSigningKeyPair, newId, type KeyPairJwk } from '@tobira/shared';
import { createCloud, parseConfig, type Cloud, type CloudDeps } from '../src/index.js';
import { T0, TEST_KEK, testLog, type TestDb } from './helpers.js';
import { waitFor } from './mqtt-helpers.js';

let sharedKey: KeyPairJwk | undefined;
/** One cloud signing key for every instance in a test file (replicas share it). */
export async function cloudSigningKey(): Promise<KeyPairJwk> {
  sharedKey ??= await generateSigningKeyPair();
  return sharedKey;
}

export async function startCloud(
  t: TestDb,
  mqttUrl: string,
  opts: { clock?: ManualClock; env?: Record<string, string>; deps?: Partial<CloudDeps>; ownPool?: boolean } = {},
): Promise<Cloud & { clock: ManualClock }> {
  const clock = opts.clock ?? new ManualClock(T0);
  const key = await cloudSigningKey();
  const config = parseConfig({
    MQTT_URL: mqttUrl,
    CLOUD_SIGNING_JWK: JSON.stringify(key.privateJwk),
    TOBIRA_KEK: TEST_KEK,
    DISPATCH_POLL_MS: '200',
    HEARTBEAT_INTERVAL_MS: '3600000',
    MQTT_CLIENT_ID: `cloud-test-${newId().slice(-12)}`,
    MQTT_CLEAN_SESSION: 'true',
    ...(opts.ownPool && t.databaseUrl ? { DATABASE_URL: t.databaseUrl } : {}),
    ...opts.env,
  });
  const useShared = !(opts.ownPool && t.databaseUrl);
  const cloud = createCloud(config, {
    clock,
    log: testLog.child({ instance: newId().slice(-4) }),
    ...(useShared ? { db: t.db } : {}),
    ...opts.deps,
  });
  await cloud.start();
  await waitFor(() => cloud.mqttConnected, 'cloud MQTT connection');
  return Object.assign(cloud, { clock });
}
