import { describe, expect, it } from 'vitest';
import { brokerAccountsFromConfig } from '../src/adapters/broker/index.js';
import { parseConfig } from '../src/config.js';
import { testLog } from './helpers.js';

describe('broker accounts config', () => {
  it('defaults to unmanaged accounts and no gateway broker URL; the unmanaged port gives no credentials', async () => {
    const c = parseConfig({});
    expect(c.brokerAccounts.kind).toBe('unmanaged');
    expect(c.gatewayBrokerUrl).toBeNull();
    const a = brokerAccountsFromConfig(c, testLog);
    expect(a.kind).toBe('unmanaged');
    expect(await a.provisionGateway(null as never, 'gw-1', testLog)).toBeNull();
  });

  it('mosquitto-dynsec needs an admin login: none is refused at start-up', () => {
    expect(() => parseConfig({ BROKER_ACCOUNTS: 'mosquitto-dynsec' })).toThrow(/BROKER_ADMIN_USERNAME/);
    expect(() => parseConfig({ BROKER_ACCOUNTS: 'mosquitto-dynsec', BROKER_ADMIN_USERNAME: 'admin' })).toThrow(/BROKER_ADMIN_PASSWORD/);
    expect(() => parseConfig({ BROKER_ACCOUNTS: 'nonsense' })).toThrow();
  });

  it('the admin login and URL fall back to the cloud link; BROKER_ADMIN_* override them', () => {
    const base = { BROKER_ACCOUNTS: 'mosquitto-dynsec', MQTT_URL: 'mqtt://broker:1883', MQTT_USERNAME: 'link', MQTT_PASSWORD: 'link-pw' };
    expect(parseConfig(base).brokerAccounts).toEqual({
      kind: 'mosquitto-dynsec',
      adminUrl: 'mqtt://broker:1883',
      adminUsername: 'link',
      adminPassword: 'link-pw',
      timeoutMs: 5000,
    });
    const own = parseConfig({
      ...base,
      BROKER_ADMIN_URL: 'mqtt://admin:1883',
      BROKER_ADMIN_USERNAME: 'admin',
      BROKER_ADMIN_PASSWORD: 'admin-pw',
      BROKER_ADMIN_TIMEOUT_MS: '250',
      GATEWAY_BROKER_URL: 'mqtts://gw.example:8883',
    });
    expect(own.brokerAccounts).toEqual({
      kind: 'mosquitto-dynsec',
      adminUrl: 'mqtt://admin:1883',
      adminUsername: 'admin',
      adminPassword: 'admin-pw',
      timeoutMs: 250,
    });
    expect(own.gatewayBrokerUrl).toBe('mqtts://gw.example:8883');
    expect(brokerAccountsFromConfig(own, testLog).kind).toBe('mosquitto-dynsec');
  });
});
