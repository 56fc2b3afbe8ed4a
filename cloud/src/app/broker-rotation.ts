import { applied, newCorrelationId, refused, withCorrelation, type CorrelationId, type Outcome } from '@tobira/shared';
import { BrokerUnavailable, type BrokerCredentials } from './broker-accounts.js';
import type { AppDeps } from './deps.js';
import { getGateway } from '../adapters/db/gateways.js';
import type { SiteScope } from '../adapters/db/scope.js';

export interface RotatedBrokerCredentials {
  readonly gatewayId: string;
  readonly mqtt: BrokerCredentials;
}

/**
 * Gives a gateway a new cloud-broker password: the old one stops working, and
 * the sessions that logged in with it are cut (docs/architecture.md). Refused: GATEWAY_NOT_FOUND; BROKER_ACCOUNTS_UNMANAGED when
 * the cloud does not manage broker accounts; BROKER_UNAVAILABLE when the broker
 * could not make the change (nothing changed in the database).
 */
export async function rotateGatewayBrokerCredentials(
  deps: AppDeps,
  input: { gatewayId: string; cid?: CorrelationId; siteScope?: SiteScope },
): Promise<Outcome<RotatedBrokerCredentials>> {
  const { gatewayId } = input;
  // the caller's correlation on every line, the broker adapter's included
  const log = withCorrelation(deps.log, input.cid ?? newCorrelationId(), { gatewayId });
  // a gateway outside the caller's sites (siteScope) is not found either
  if ((await getGateway(deps.db, input.siteScope ?? null, gatewayId)) === null) return refused('GATEWAY_NOT_FOUND');
  let mqtt: BrokerCredentials | null;
  try {
    mqtt = await deps.db.transaction((tx) => deps.brokerAccounts.provisionGateway(tx, gatewayId, log));
  } catch (e) {
    if (e instanceof BrokerUnavailable) {
      log.warn({ err: e.message }, 'broker password not rotated');
      return refused('BROKER_UNAVAILABLE', e.message);
    }
    throw e;
  }
  if (mqtt === null) return refused('BROKER_ACCOUNTS_UNMANAGED');
  return applied('BROKER_CREDENTIALS_ROTATED', { gatewayId, mqtt });
}
