import { GatewayId, gatewayCloudClientId, topics } from '@tobira/shared';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  SERVICE_FILTER,
  gatewayAcl,
  gatewayDynsecAcls,
  gatewayIdOfUsername,
  gatewayUsername,
  mayPublish,
  mayReceive,
  maySubscribe,
  mayUseClientId,
  serviceDynsecAcls,
  type BrokerAccount,
} from '../src/adapters/broker/acl.js';

const gw = (gatewayId: string): BrokerAccount => ({ kind: 'gateway', gatewayId });
const service: BrokerAccount = { kind: 'service' };

describe('a gateway broker account', () => {
  it('is named gw:{gatewayId}, and only gateway ids round-trip', () => {
    expect(gatewayUsername('gw-1')).toBe('gw:gw-1');
    expect(gatewayIdOfUsername('gw:gw-1')).toBe('gw-1');
    expect(gatewayIdOfUsername('tobira-cloud')).toBeNull();
    expect(gatewayIdOfUsername('gw:a/b')).toBeNull();
    expect(gatewayIdOfUsername('gw:')).toBeNull();
  });

  it('subscribes to its down, publishes its up and presence, receives its down: nothing else', () => {
    expect(gatewayAcl('a')).toEqual({
      subscribe: ['tobira/v1/gw/a/down'],
      publish: ['tobira/v1/gw/a/up', 'tobira/v1/gw/a/presence'],
      receive: ['tobira/v1/gw/a/down'],
    });
    expect(maySubscribe(gw('a'), topics.gatewayDown('a'))).toBe(true);
    expect(mayPublish(gw('a'), topics.gatewayUp('a'))).toBe(true);
    expect(mayPublish(gw('a'), topics.gatewayPresence('a'))).toBe(true);
    expect(mayReceive(gw('a'), topics.gatewayDown('a'))).toBe(true);
    // not the other direction of its own channels
    expect(mayPublish(gw('a'), topics.gatewayDown('a'))).toBe(false);
    expect(maySubscribe(gw('a'), topics.gatewayUp('a'))).toBe(false);
    expect(mayReceive(gw('a'), topics.gatewayUp('a'))).toBe(false);
    // not the site broker's lock topics either
    expect(maySubscribe(gw('a'), topics.lock('a', 'L1', 'request'))).toBe(false);
  });

  it("gateway a gets nothing of gateway ab's topics, nor of a prefix-sharing or wildcard filter", () => {
    for (const other of ['ab', 'a_', 'A', 'b']) {
      expect(maySubscribe(gw('a'), topics.gatewayDown(other))).toBe(false);
      expect(mayReceive(gw('a'), topics.gatewayDown(other))).toBe(false);
      expect(mayPublish(gw('a'), topics.gatewayUp(other))).toBe(false);
      expect(mayPublish(gw('a'), topics.gatewayPresence(other))).toBe(false);
    }
    for (const filter of [
      'tobira/v1/gw/+/down',
      'tobira/v1/gw/#',
      'tobira/v1/gw/a/#',
      'tobira/v1/gw/a/+',
      '#',
      'tobira/v1/gw/a/b/down',
      'tobira/v1/gw/a/down/#',
    ]) {
      expect(maySubscribe(gw('a'), filter)).toBe(false);
    }
    expect(mayPublish(gw('a'), 'tobira/v1/gw/a/b/up')).toBe(false);
  });

  it('an id with a level separator or a wildcard is not a gateway id, so it has no account', () => {
    for (const bad of ['a/b', '+', '#', 'a+', 'a#', '', 'gw:a', '$SYS']) {
      expect(GatewayId.safeParse(bad).success).toBe(false);
      expect(() => gatewayUsername(bad)).toThrow();
      expect(() => gatewayAcl(bad)).toThrow();
    }
  });

  it('for any two different gateway ids, neither may touch the other (property)', () => {
    const id = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/);
    fc.assert(
      fc.property(id, id, (a, b) => {
        fc.pre(a !== b);
        const topicsOfB = [topics.gatewayDown(b), topics.gatewayUp(b), topics.gatewayPresence(b)];
        return topicsOfB.every((t) => !maySubscribe(gw(a), t) && !mayPublish(gw(a), t) && !mayReceive(gw(a), t));
      }),
    );
  });

  it("connects only under its cloud link's client id (what the gateway uses), never another gateway's, the site link's or a made-up one", () => {
    expect(gatewayCloudClientId('a')).toBe('tobira-gw-a');
    expect(mayUseClientId(gw('a'), gatewayCloudClientId('a'))).toBe(true);
    for (const other of [
      gatewayCloudClientId('b'),
      gatewayCloudClientId('ab'),
      'tobira-gw-a-site',
      'tobira-gw-A',
      'a',
      'tobira-cloud',
      '',
      ' tobira-gw-a',
    ]) {
      expect(mayUseClientId(gw('a'), other), other).toBe(false);
    }
    const id = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/);
    fc.assert(fc.property(id, id, (a, b) => a === b || !mayUseClientId(gw(a), gatewayCloudClientId(b))));
  });

  it('its dynsec role is the same ACL as literal entries', () => {
    expect(gatewayDynsecAcls('a')).toEqual([
      { acltype: 'subscribeLiteral', topic: 'tobira/v1/gw/a/down', allow: true },
      { acltype: 'unsubscribeLiteral', topic: 'tobira/v1/gw/a/down', allow: true },
      { acltype: 'publishClientSend', topic: 'tobira/v1/gw/a/up', allow: true },
      { acltype: 'publishClientSend', topic: 'tobira/v1/gw/a/presence', allow: true },
      { acltype: 'publishClientReceive', topic: 'tobira/v1/gw/a/down', allow: true },
    ]);
  });
});

describe('the service account', () => {
  it('may use every gateway topic, and nothing outside tobira/v1/gw/', () => {
    expect(maySubscribe(service, 'tobira/v1/gw/+/up')).toBe(true);
    expect(maySubscribe(service, 'tobira/v1/gw/+/presence')).toBe(true);
    expect(maySubscribe(service, SERVICE_FILTER)).toBe(true);
    expect(mayPublish(service, topics.gatewayDown('any'))).toBe(true);
    expect(mayReceive(service, topics.gatewayUp('any'))).toBe(true);
    expect(maySubscribe(service, '#')).toBe(false);
    expect(maySubscribe(service, 'tobira/v1/site/+/lock/+/request')).toBe(false);
    expect(mayPublish(service, 'tobira/v1/site/g/lock/L1/command')).toBe(false);
    expect(mayPublish(service, 'tobira/v1/gw/')).toBe(false);
    expect(serviceDynsecAcls().every((a) => a.topic === SERVICE_FILTER)).toBe(true);
  });

  it('is not pinned to a client id: every replica connects under its own MQTT_CLIENT_ID', () => {
    for (const clientId of ['tobira-cloud-host-1', 'cloud-test-x', 'any']) expect(mayUseClientId(service, clientId)).toBe(true);
  });
});
