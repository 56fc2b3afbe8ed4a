import { applied, refused, type Outcome } from '@tobira/shared';
import { BrokerUnavailable, type BrokerCredentials } from './broker-accounts.js';
import type { AppDeps } from './deps.js';

export interface RotatedBrokerCredentials {
  readonly gatewayId: string;
  readonly mqtt: BrokerCredentials;
}

/**
 * Gives a gateway a new cloud-broker password (the old one stops working for
 * new connections). Refused: GATEWAY_NOT_FOUND; BROKER_ACCOUNTS_UNMANAGED when
 * the cloud does not manage broker accounts; BROKER_UNAVAILABLE when the broker
 * could not make the change (nothing changed in the database).
 */
export async function rotateGatewayBrokerCredentials(deps: AppDeps, gatewayId: string): Promise<Outcome<RotatedBrokerCredentials>> {
  const gw = await deps.db.query('SELECT 1 FROM gateways WHERE id = $1', [gatewayId]);
  if (gw.rowCount === 0) return refused('GATEWAY_NOT_FOUND');
  let mqtt: BrokerCredentials | null;
  try {
    mqtt = await deps.db.transaction((tx) => deps.brokerAccounts.provisionGateway(tx, gatewayId, deps.log));
  } catch (e) {
    if (e instanceof BrokerUnavailable) {
      deps.log.warn({ gatewayId, err: e.message }, 'broker password not rotated');
      return refused('BROKER_UNAVAILABLE', e.message);
    }
    throw e;
  }
  if (mqtt === null) return refused('BROKER_ACCOUNTS_UNMANAGED');
  return applied('BROKER_CREDENTIALS_ROTATED', { gatewayId, mqtt });
}
