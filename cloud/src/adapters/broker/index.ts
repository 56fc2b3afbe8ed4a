import type { Logger } from '@tobira/shared';
import { unmanagedBrokerAccounts, type BrokerAccounts } from '../../app/broker-accounts.js';
import type { CloudConfig } from '../../config.js';
import { DynsecBrokerAccounts } from './dynsec.js';

export * from './acl.js';
export { DynsecBrokerAccounts, type DynsecOptions } from './dynsec.js';
export { EmbeddedBrokerAccounts, openEmbeddedBrokerAccounts, setServiceAccount, type AedesAuthHooks } from './embedded.js';

/** Broker accounts with a lifecycle of their own (an admin connection): main.ts starts them before the cloud and stops them after. */
export interface ManagedBrokerAccounts extends BrokerAccounts {
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** The BrokerAccounts of the config (BROKER_ACCOUNTS). The embedded broker's accounts are not here: only the demo runs that broker. */
export function brokerAccountsFromConfig(config: CloudConfig, log: Logger): ManagedBrokerAccounts {
  const b = config.brokerAccounts;
  switch (b.kind) {
    case 'unmanaged':
      return { ...unmanagedBrokerAccounts, start: () => Promise.resolve(), stop: () => Promise.resolve() };
    case 'mosquitto-dynsec':
      if (!b.adminUsername || !b.adminPassword) throw new Error('mosquitto-dynsec needs an admin login');
      return new DynsecBrokerAccounts({
        url: b.adminUrl,
        username: b.adminUsername,
        password: b.adminPassword,
        timeoutMs: b.timeoutMs,
        clientId: `${config.mqttClientId}-dynsec`.slice(0, 128),
        log,
      });
  }
}
