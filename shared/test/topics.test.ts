import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { GATEWAY_CHANNELS, LOCK_CHANNELS, filters, parseTopic, topics } from '../src/index.js';

const slug = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/);

describe('topics', () => {
  it('every built topic parses back to what built it', () => {
    fc.assert(
      fc.property(slug, slug, fc.constantFrom(...LOCK_CHANNELS), (gw, lock, channel) => {
        expect(parseTopic(topics.lock(gw, lock, channel))).toEqual({ kind: 'lock', gatewayId: gw, lockId: lock, channel });
        expect(parseTopic(topics.gatewayDown(gw))).toEqual({ kind: 'gateway', gatewayId: gw, channel: 'down' });
        expect(parseTopic(topics.gatewayUp(gw))).toEqual({ kind: 'gateway', gatewayId: gw, channel: 'up' });
        expect(parseTopic(topics.gatewayPresence(gw))).toEqual({ kind: 'gateway', gatewayId: gw, channel: 'presence' });
      }),
    );
  });

  it('lists every gateway channel', () => {
    expect(GATEWAY_CHANNELS.map((c) => parseTopic(`tobira/v1/gw/gw-1/${c}`)?.kind)).toEqual(GATEWAY_CHANNELS.map(() => 'gateway'));
  });

  it.each([
    ['wildcard +', 'tobira/v1/gw/+/up'],
    ['wildcard #', 'tobira/v1/gw/gw-1/#'],
    ['a filter', filters.allGatewaysUp],
    ['a lock filter', filters.locksOf('gw-1', 'request')],
    ['empty level', 'tobira/v1/gw//up'],
    ['trailing slash', 'tobira/v1/gw/gw-1/up/'],
    ['leading slash', '/tobira/v1/gw/gw-1/up'],
    ['unknown channel', 'tobira/v1/gw/gw-1/sideways'],
    ['unknown version', 'tobira/v2/gw/gw-1/up'],
    ['unknown root', 'other/v1/gw/gw-1/up'],
    ['too short', 'tobira/v1/gw'],
    ['too long', 'tobira/v1/site/gw-1/lock/L1/state/extra'],
    ['id with a dot', 'tobira/v1/gw/gw.1/up'],
    ['id too long', `tobira/v1/gw/${'a'.repeat(65)}/up`],
    ['id starting with a dash', 'tobira/v1/gw/-gw/up'],
    ['empty', ''],
  ])('refuses %s', (_name, topic) => {
    expect(parseTopic(topic)).toBeNull();
  });

  it('builders refuse ids that are not valid topic levels', () => {
    expect(() => topics.gatewayDown('+')).toThrow(TypeError);
    expect(() => topics.lock('gw-1', 'a/b', 'state')).toThrow(TypeError);
    expect(() => topics.gatewayUp('')).toThrow(TypeError);
  });

  it('fuzz: parseTopic never throws and only accepts slug levels', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string(), fc.string({ unit: 'binary' }), fc.anything()), (input) => {
        const r = parseTopic(input);
        if (r !== null) {
          expect(typeof input).toBe('string');
          expect(input as string).not.toMatch(/[+#]|\/\//);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('fuzz: near-valid topics (levels mutated) never throw', () => {
    const level = fc.oneof(slug, fc.constantFrom('', '+', '#', 'gw', 'site', 'lock', 'up', 'down', 'state'), fc.string({ maxLength: 4 }));
    fc.assert(
      fc.property(fc.array(level, { minLength: 0, maxLength: 9 }), (levels) => {
        const r = parseTopic(['tobira', 'v1', ...levels].join('/'));
        if (r !== null) expect(levels.every((l) => l.length > 0 && !l.includes('+') && !l.includes('#'))).toBe(true);
      }),
      { numRuns: 3000 },
    );
  });
});
