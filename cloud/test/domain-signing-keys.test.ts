import { describe, expect, it } from 'vitest';
import { publish, retire, switchAway, switchTo, type SigningKeyState, type SigningKeyStatus } from '../src/domain/signing-keys.js';

const NOW = Date.UTC(2026, 11, 2, 9);
const EARLIER = NOW - 3_600_000;

const key = (status: SigningKeyStatus, over: Partial<SigningKeyState> = {}): SigningKeyState => ({
  kid: 'kid-2',
  status,
  notBefore: EARLIER,
  retireAfter: null,
  resignedAt: null,
  updatedAt: EARLIER,
  ...over,
});

const ready = { loaded: true, notAcked: [] as string[], retireAfter: NOW + 86_400_000 };

describe('publish', () => {
  it('a staged key becomes published, trusted from now', () => {
    const o = publish(key('staged', { notBefore: null }), 3, NOW);
    expect(o).toMatchObject({ status: 'applied', code: 'SIGNING_KEY_PUBLISHED' });
    if (o.status !== 'applied') return;
    expect(o.state).toEqual({ ...key('staged'), status: 'published', notBefore: NOW, updatedAt: NOW });
  });
  it('a staged key is published even when no gateway is registered yet', () => {
    expect(publish(key('staged'), 0, NOW)).toMatchObject({ status: 'applied', state: { status: 'published' } });
  });
  it.each(['published', 'signing', 'previous'] as const)(
    'publishing a %s key again re-sends to gateways that lack it, keeping the key as it was',
    (status) => {
      const k = key(status);
      expect(publish(k, 2, NOW)).toEqual({ status: 'applied', code: 'SIGNING_KEY_PUBLISHED', state: k, emits: [] });
      expect(publish(k, 1, NOW)).toMatchObject({ status: 'applied', state: k });
    },
  );
  it.each(['published', 'signing', 'previous'] as const)('publishing a %s key every gateway already applied changes nothing', (status) => {
    const k = key(status);
    expect(publish(k, 0, NOW)).toEqual({ status: 'noop', code: 'SIGNING_KEY_ALREADY_PUBLISHED', state: k });
  });
  it('a retired key is never published again, whatever gateways lack it', () => {
    for (const pending of [0, 5]) {
      const o = publish(key('retired'), pending, NOW);
      expect(o).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_WRONG_STATE' });
      expect(o.status === 'refused' && o.detail).toMatch(/retired/);
    }
  });
  it('an unknown key: SIGNING_KEY_NOT_FOUND', () => {
    expect(publish(null, 1, NOW)).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_NOT_FOUND' });
  });
});

describe('switchTo', () => {
  it.each(['published', 'previous'] as const)(
    'a %s key every gateway applied, held by this process, becomes the signer with no retirement due',
    (status) => {
      const k = key(status, { retireAfter: NOW + 5, resignedAt: EARLIER });
      const o = switchTo(k, ready, NOW);
      expect(o).toMatchObject({ status: 'applied', code: 'SIGNING_KEY_SWITCHED' });
      if (o.status !== 'applied') return;
      expect(o.state).toEqual({ ...k, status: 'signing', retireAfter: null, updatedAt: NOW });
    },
  );
  it('the current signer: a noop, even when not loaded or not delivered', () => {
    const k = key('signing');
    expect(switchTo(k, { loaded: false, notAcked: ['gw-1'], retireAfter: NOW }, NOW)).toEqual({
      status: 'noop',
      code: 'SIGNING_KEY_ALREADY_SIGNING',
      state: k,
    });
  });
  it('an unknown key: SIGNING_KEY_NOT_FOUND', () => {
    expect(switchTo(null, ready, NOW)).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_NOT_FOUND' });
  });
  it('a staged key never signs before it is published', () => {
    expect(switchTo(key('staged'), ready, NOW)).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_NOT_PUBLISHED' });
  });
  it('a retired key never signs again', () => {
    const o = switchTo(key('retired'), ready, NOW);
    expect(o).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_WRONG_STATE' });
    expect(o.status === 'refused' && o.detail).toMatch(/retired/);
  });
  it('a key this process does not hold is refused before delivery is even looked at', () => {
    expect(switchTo(key('published'), { ...ready, loaded: false }, NOW)).toMatchObject({
      status: 'refused',
      code: 'SIGNING_KEY_NOT_LOADED',
    });
    expect(switchTo(key('published'), { ...ready, loaded: false, notAcked: ['gw-1'] }, NOW)).toMatchObject({
      code: 'SIGNING_KEY_NOT_LOADED',
    });
  });
  it('a key some gateway has not applied is refused, naming how many and which (at most ten)', () => {
    const one = switchTo(key('published'), { ...ready, notAcked: ['gw-7'] }, NOW);
    expect(one).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_NOT_DELIVERED' });
    expect(one.status === 'refused' && one.detail).toBe('not applied by 1 gateway(s): gw-7; publish again to re-send');

    const many = Array.from({ length: 12 }, (_, i) => `gw-${i + 1}`);
    const o = switchTo(key('previous'), { ...ready, notAcked: many }, NOW);
    expect(o).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_NOT_DELIVERED' });
    const detail = o.status === 'refused' ? (o.detail ?? '') : '';
    expect(detail).toContain('not applied by 12 gateway(s)');
    expect(detail).toContain(many.slice(0, 10).join(', '));
    expect(detail).not.toContain('gw-11');
  });
});

describe('switchAway', () => {
  it('the old signer becomes previous, announced to retire, and must be re-signed for again', () => {
    const k = key('signing', { resignedAt: EARLIER });
    expect(switchAway(k, NOW + 86_400_000, NOW)).toEqual({
      ...k,
      status: 'previous',
      retireAfter: NOW + 86_400_000,
      resignedAt: null,
      updatedAt: NOW,
    });
  });
});

describe('retire', () => {
  it('a previous key re-signed for is retired at its announced time when that is still ahead', () => {
    const k = key('previous', { retireAfter: NOW + 1000, resignedAt: EARLIER });
    const o = retire(k, NOW);
    expect(o).toMatchObject({ status: 'applied', code: 'SIGNING_KEY_RETIRED' });
    if (o.status !== 'applied') return;
    expect(o.state).toEqual({ ...k, status: 'retired', retireAfter: NOW, updatedAt: NOW });
  });
  it('the recorded retirement is never later than now, and keeps an earlier announced time', () => {
    const earlier = retire(key('previous', { retireAfter: EARLIER, resignedAt: EARLIER }), NOW);
    expect(earlier).toMatchObject({ status: 'applied', state: { retireAfter: EARLIER } });
    const none = retire(key('previous', { retireAfter: null, resignedAt: EARLIER }), NOW);
    expect(none).toMatchObject({ status: 'applied', state: { retireAfter: NOW } });
  });
  it('an already retired key: a noop', () => {
    const k = key('retired', { retireAfter: EARLIER });
    expect(retire(k, NOW)).toEqual({ status: 'noop', code: 'SIGNING_KEY_ALREADY_RETIRED', state: k });
  });
  it('the current signer is never retired', () => {
    expect(retire(key('signing', { resignedAt: EARLIER }), NOW)).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_IS_SIGNER' });
  });
  it.each(['staged', 'published'] as const)('a %s key never signed, so it is not retired', (status) => {
    const o = retire(key(status, { resignedAt: EARLIER }), NOW);
    expect(o).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_WRONG_STATE' });
    expect(o.status === 'refused' && o.detail).toMatch(/previous/);
  });
  it('a previous key whose live grants were not re-sent since the switch: SIGNING_KEY_RESIGN_PENDING', () => {
    expect(retire(key('previous', { retireAfter: EARLIER }), NOW)).toMatchObject({
      status: 'refused',
      code: 'SIGNING_KEY_RESIGN_PENDING',
    });
  });
  it('an unknown key: SIGNING_KEY_NOT_FOUND', () => {
    expect(retire(null, NOW)).toMatchObject({ status: 'refused', code: 'SIGNING_KEY_NOT_FOUND' });
  });
});

describe('a full rotation', () => {
  it('staged → published → signing, the old signer previous → re-signed → retired; a retired key stays retired', () => {
    const published = publish(key('staged'), 2, NOW);
    if (published.status !== 'applied') throw new Error('publish failed');
    const switched = switchTo(published.state, ready, NOW + 1);
    if (switched.status !== 'applied') throw new Error('switch failed');
    const old = switchAway(key('signing', { kid: 'kid-1' }), NOW + 100, NOW + 1);
    expect(retire(old, NOW + 2)).toMatchObject({ code: 'SIGNING_KEY_RESIGN_PENDING' });
    const retired = retire({ ...old, resignedAt: NOW + 2 }, NOW + 3);
    if (retired.status !== 'applied') throw new Error('retire failed');
    expect(retired.state).toMatchObject({ kid: 'kid-1', status: 'retired', retireAfter: NOW + 3 });
    expect(switched.state.status).toBe('signing');
    expect(publish(retired.state, 1, NOW + 4).status).toBe('refused');
    expect(switchTo(retired.state, ready, NOW + 4).status).toBe('refused');
  });
});
