import type { Logger } from '@tobira/shared';
import type { Tx } from '../adapters/db/db.js';

/** A gateway's login on the cloud MQTT broker, shown once at provisioning. */
export interface BrokerCredentials {
  readonly username: string;
  readonly password: string;
}

/** The broker could not create or change an account; the registration rolls back (BROKER_UNAVAILABLE, 503). */
export class BrokerUnavailable extends Error {
  constructor(detail: string) {
    super(detail);
    this.name = 'BrokerUnavailable';
  }
}

/**
 * Port: the cloud broker's per-gateway accounts (docs/architecture.md "Broker
 * accounts"). A gateway's account may subscribe to its own downlink and
 * publish its own uplink and presence, nothing else.
 */
export interface BrokerAccounts {
  readonly kind: string;
  /**
   * Creates the gateway's account, or gives it a new password if it exists.
   * Runs inside the caller's transaction `db`: a store in the cloud database
   * commits with the registration; an external broker that fails throws
   * BrokerUnavailable, which rolls the registration back. null: accounts are
   * not managed by the cloud (the operator provisions the broker).
   */
  provisionGateway(db: Tx, gatewayId: string, log: Logger): Promise<BrokerCredentials | null>;
}

/** No managed accounts: provisioning carries no credentials (a broker the operator runs with its own auth). */
export const unmanagedBrokerAccounts: BrokerAccounts = Object.freeze({
  kind: 'unmanaged',
  provisionGateway: () => Promise.resolve(null),
});
