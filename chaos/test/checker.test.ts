import { describe, expect, it } from 'vitest';
import { check } from '../checker.js';
import type { Entry } from '../history.js';

interface Line {
  readonly t: number;
  readonly who: string;
  readonly what: string;
  readonly [k: string]: unknown;
}
/** Builds a history from partial entries (line numbers and wall times filled in). */
function history(...es: Line[]): Entry[] {
  return es.map((e, n): Entry => ({ wall: 1_800_000_000_000 + e.t, ...e, i: n + 1 }));
}
const opts = { offlineGraceSeconds: 10, slackMs: 1000 };
const issue = (t: number, keyId = 'k1', validUntil = 1_900_000_000_000) => ({
  t,
  who: 'workload',
  what: 'issue',
  keyId,
  status: 202,
  validUntil,
});
const hb = (t: number) => ({ t, who: 'gw', what: 'heartbeat', result: 'applied' });
const allow = (t: number, extra: Record<string, unknown> = {}) => ({
  t,
  who: 'workload',
  what: 'present',
  gatewayId: 'gw',
  lockId: 'L1',
  kind: 'valid',
  keyId: 'k1',
  tSend: t - 50,
  wallSend: 1_800_000_000_000 + t - 50,
  decided: true,
  allowed: true,
  commandId: 'c1',
  ...extra,
});

describe('the checker', () => {
  it('passes an unlock with a granted key and a recent heartbeat', () => {
    const v = check(history(issue(0), hb(100), allow(5000)), opts);
    expect(v.violations).toEqual([]);
    expect(v.checks['I1 allowed decisions checked']).toBe(1);
  });

  it('reports an unlock more than offlineGraceSeconds of real time after the last heartbeat, with both lines', () => {
    const v = check(history(issue(0), hb(100), allow(12_000)), opts);
    expect(v.violations.map((x) => [x.invariant, x.lines])).toEqual([['I1 offline grace', [2, 3]]]);
  });

  it('reports an unlock after the cloud showed the revoke acknowledged', () => {
    const v = check(
      history(issue(0), hb(100), { t: 1000, who: 'cloud', what: 'key-status', keyId: 'k1', status: 'revoked' }, hb(1500), allow(2000)),
      opts,
    );
    expect(v.violations.map((x) => x.invariant)).toEqual(['I1 revoke acked']);
  });

  it('reports an unlock longer than the grace after a revoke the cloud committed (a lease renewed over it)', () => {
    const v = check(
      history(issue(0), { t: 1000, who: 'workload', what: 'revoke', keyId: 'k1', status: 202 }, hb(11_500), allow(12_500)),
      opts,
    );
    expect(v.violations.map((x) => x.invariant)).toEqual(['I1 revoke lag']);
  });

  it('reports an unlock for a PIN nobody was given, and a lock that ran a command no decision allowed', () => {
    const v = check(
      history(hb(0), allow(100, { kind: 'wrong', keyId: null }), {
        t: 200,
        who: 'fleet',
        what: 'lock-command',
        lockId: 'L1',
        commandId: 'other',
        result: 'executed',
      }),
      opts,
    );
    expect(v.violations.map((x) => x.invariant)).toEqual(['I1 no grant', 'I1 lock']);
  });

  it('reports a healthz that said fresh when the lease must have run out', () => {
    const v = check(
      history(hb(0), { t: 15_000, who: 'gw', what: 'health', gatewayId: 'gw', tSend: 14_900, ok: true, failClosedReason: null }),
      opts,
    );
    expect(v.violations.map((x) => x.invariant)).toEqual(['fail-closed reported']);
  });

  it('reports an unlock before the key window began by more than the clock tolerance, not one within it', () => {
    const from = 1_800_000_000_000 + 60_000;
    const early = check(history({ ...issue(0), validFrom: from }, hb(100), allow(5000)), opts);
    expect(early.violations.map((x) => x.invariant)).toEqual(['I1 not yet valid']);
    const within = check(history({ ...issue(0), validFrom: from }, hb(25_000), allow(31_000)), opts);
    expect(within.violations).toEqual([]);
  });

  it("reports an unlock outside a scheduled key's window (the clock tolerance early allowed, nothing late), not one inside", () => {
    const base = 1_800_000_000_000;
    const scheduled = { ...issue(0), scheduleFrom: base + 60_000, scheduleUntil: base + 180_000 };
    const early = check(history(scheduled, hb(20_000), allow(25_000)), opts);
    expect(early.violations.map((x) => x.invariant)).toEqual(['I1 outside schedule']);
    const late = check(history(scheduled, hb(182_000), allow(183_000)), opts);
    expect(late.violations.map((x) => x.invariant)).toEqual(['I1 outside schedule']);
    const inside = check(history(scheduled, hb(35_000), allow(40_000, { commandId: 'c2' }), hb(99_000), allow(100_000)), opts);
    expect(inside.violations).toEqual([]);
    expect(inside.checks['I1 scheduled keys checked']).toBe(2);
  });

  describe('lease renewals', () => {
    const ignored = (t: number) => ({ t, who: 'gw', what: 'heartbeat', result: 'noop', code: 'REPORT_IGNORED', lastSeq: 5, appliedSeq: 4 });
    it('does not count a heartbeat answered REPORT_IGNORED as a renewal: the grace runs from the last one that gave a lease', () => {
      const v = check(history(issue(0), hb(100), ignored(9000), allow(12_000)), opts);
      expect(v.violations.map((x) => [x.invariant, x.lines])).toEqual([['I1 offline grace', [2, 4]]]);
    });

    it('counts a behind heartbeat that settled once the gap was filled', () => {
      const v = check(
        history(issue(0), hb(100), ignored(9000), { t: 9500, who: 'gw', what: 'lease-settled', lastSeq: 5, appliedSeq: 5 }, allow(12_000)),
        opts,
      );
      expect(v.violations).toEqual([]);
    });

    it("reports a lease extended by a heartbeat whose seq is ahead of the gateway's applied seq", () => {
      const v = check(history({ ...hb(100), lastSeq: 7, appliedSeq: 6 }, { ...hb(1100), lastSeq: 7, appliedSeq: 7 }), opts);
      expect(v.violations.map((x) => [x.invariant, x.lines])).toEqual([['I1 lease over gap', [1]]]);
      expect(v.checks['I1 lease renewals checked']).toBe(2);
    });
  });

  describe('revokes', () => {
    it('counts the revoke lag from the commit with little slack: 700 ms past the grace is reported', () => {
      const v = check(
        history(
          issue(0),
          { t: 1000, who: 'workload', what: 'revoke', keyId: 'k1', status: 202 },
          hb(11_000),
          allow(11_800, { tSend: 11_700 }),
        ),
        opts,
      );
      expect(v.violations.map((x) => x.invariant)).toEqual(['I1 revoke lag']);
    });

    it('tracks a revoke whose answer was lost but which the cloud showed committed (revoking), from when it showed it', () => {
      const h = history(
        issue(0),
        { t: 1000, who: 'workload', what: 'revoke', keyId: 'k1', status: 0, error: 'timeout' },
        { t: 1500, who: 'cloud', what: 'key-status', keyId: 'k1', status: 'revoking' },
        hb(11_900),
        allow(12_200, { tSend: 12_100 }),
      );
      expect(check(h, opts).violations.map((x) => [x.invariant, x.lines])).toEqual([['I1 revoke lag', [3, 5]]]);
      // a lost answer alone proves nothing: the revoke may not have committed
      expect(
        check(
          h.filter((e) => e.what !== 'key-status'),
          opts,
        ).violations,
      ).toEqual([]);
    });

    it('does not claim the revoke lag while the gateway clock was off (trusted time may lag by a transit), only the grace', () => {
      const v = check(
        history(
          issue(0),
          { t: 500, who: 'gw', what: 'clock-set', offsetMs: -600_000, stopped: false },
          { t: 1000, who: 'workload', what: 'revoke', keyId: 'k1', status: 202 },
          hb(11_000),
          allow(11_800, { tSend: 11_700 }),
        ),
        opts,
      );
      expect(v.violations).toEqual([]);
    });

    it("reports an unlock after the gateway reported applying the revoke's seq (from the cloud's history)", () => {
      const v = check(
        history(issue(0), { ...hb(100), lastSeq: 2, appliedSeq: 2 }, { ...hb(1100), lastSeq: 3, appliedSeq: 3 }, allow(1500), {
          t: 20_000,
          who: 'collect',
          what: 'cloud-revoke',
          keyId: 'k1',
          seq: 3,
        }),
        opts,
      );
      expect(v.violations.map((x) => [x.invariant, x.lines])).toEqual([['I1 revoke applied before', [5, 3, 4]]]);
    });
  });

  describe('decisions only the access log shows', () => {
    const present = (t: number, extra: Record<string, unknown> = {}) => ({
      ...allow(t),
      allowed: null,
      decided: false,
      commandId: null,
      requestId: null,
      status: 'error',
      error: 'no answer from the fleet',
      ...extra,
    });
    const row = (t: number, extra: Record<string, unknown> = {}) => ({
      t,
      who: 'collect',
      what: 'gw-access-log',
      gatewayId: 'gw',
      lockId: 'L1',
      eventId: `e${t}`,
      requestId: `r${t}`,
      allowed: true,
      keyId: 'k1',
      commandId: `c${t}`,
      ...extra,
    });
    it('checks an allowed row whose answer was lost against the revoke, from its first present', () => {
      const v = check(
        history(
          issue(0),
          { t: 1000, who: 'workload', what: 'revoke', keyId: 'k1', status: 202 },
          hb(11_000),
          present(12_000, { kind: 'revoked', tSend: 11_900 }),
          row(30_000),
        ),
        opts,
      );
      expect(v.violations.map((x) => [x.invariant, x.lines])).toEqual([['I1 revoke lag', [2, 5]]]);
      expect(v.checks['I1 access-log-only decisions checked']).toBe(1);
    });

    it('bounds a row by its neighbours in commit order: not past the grace when a later answered row came early enough', () => {
      const v = check(
        history(
          issue(0),
          hb(100),
          present(200, { tSend: 100 }),
          allow(5000, { requestId: 'r2', tSend: 4900 }),
          row(30_000, { requestId: 'r1' }),
          row(30_001, { requestId: 'r2' }),
        ),
        opts,
      );
      expect(v.violations).toEqual([]);
    });

    it('bounds a row whose present timed out by its own request, not by the timeout (it may be decided later)', () => {
      const v = check(
        history(
          issue(0),
          hb(100),
          present(8000, { tSend: 100, requestId: 'r1', status: 'timeout' }),
          hb(10_000),
          { t: 12_000, who: 'workload', what: 'revoke', keyId: 'k1', status: 202 },
          allow(23_000, { keyId: 'k2', issue: null, requestId: 'r2', tSend: 22_900 }),
          row(30_000, { requestId: 'r1' }),
          row(30_001, { requestId: 'r2', keyId: 'k2' }),
        ),
        opts,
      );
      // decided between its request (100) and the next decided answer (23 000): nothing provable about the revoke at 12 000
      expect(v.violations.map((x) => x.invariant)).toEqual(['I1 no grant']);
    });

    it('reports an allowed row for a PIN nobody was given, and one after the grace from its request', () => {
      const v = check(history(issue(0), hb(100), present(12_500, { tSend: 12_400 }), row(30_000, { keyId: null }), row(30_001)), opts);
      expect(v.violations.map((x) => x.invariant)).toEqual(['I1 no grant', 'I1 offline grace']);
    });
  });

  describe('after healing', () => {
    const healed = { t: 20_000, who: 'runner', what: 'healed', ok: true };
    it('reports a gateway decision missing from the cloud audit, and one there twice', () => {
      const v = check(
        history(
          healed,
          { t: 20_001, who: 'collect', what: 'gw-access-log', gatewayId: 'gw', eventId: 'e1', requestId: 'r1' },
          { t: 20_002, who: 'collect', what: 'gw-access-log', gatewayId: 'gw', eventId: 'e2', requestId: 'r2' },
          { t: 20_003, who: 'collect', what: 'cloud-audit', eventId: 'e2' },
          { t: 20_004, who: 'collect', what: 'cloud-audit', eventId: 'e2' },
        ),
        opts,
      );
      expect(v.violations.map((x) => [x.invariant, x.lines])).toEqual([
        ['I2 audit exactly once', [2]],
        ['I2 audit exactly once', [3, 4, 5]],
        ['I2 audit exactly once', [4, 5]],
      ]);
    });

    it('reports key sets that differ: revoked in the cloud but active on site, active in the cloud but missing', () => {
      const v = check(
        history(
          healed,
          { t: 20_001, who: 'collect', what: 'gw-key', gatewayId: 'gw', keyId: 'k1', status: 'active' },
          { t: 20_002, who: 'collect', what: 'cloud-key', gatewayId: 'gw', keyId: 'k1', status: 'revoked' },
          { t: 20_003, who: 'collect', what: 'cloud-key', gatewayId: 'gw', keyId: 'k2', status: 'active' },
        ),
        opts,
      );
      expect(v.violations.map((x) => x.invariant)).toEqual(['revoke applied', 'key delivered', 'key sets equal']);
    });

    it('reports a key still in flight with no dead letter, and a gateway behind the seq handed out', () => {
      const v = check(
        history(
          healed,
          { t: 20_001, who: 'collect', what: 'cloud-key', gatewayId: 'gw', keyId: 'k1', status: 'revoking' },
          { t: 20_002, who: 'collect', what: 'gw-settings', gatewayId: 'gw', appliedSeq: 3 },
          { t: 20_003, who: 'collect', what: 'cloud-gateway', gatewayId: 'gw', lastSeq: 4, deadLetters: 0 },
        ),
        opts,
      );
      expect(v.violations.map((x) => x.invariant)).toEqual(['stuck without dead letter', 'outbox settled']);
    });

    it('reports a system that did not settle', () => {
      const v = check(history({ ...healed, ok: false, reason: 'gw not fresh' }), opts);
      expect(v.violations.map((x) => x.invariant)).toEqual(['heal']);
    });
  });

  describe('one-time keys', () => {
    const oneTime = (t: number) => ({ ...issue(t), oneTime: true });
    it('reports a one-time key allowed for two requests, across a restore, from an answer and an access-log row', () => {
      const v = check(
        history(
          oneTime(0),
          hb(100),
          allow(1000, { requestId: 'r1' }),
          { t: 1500, who: 'gw', what: 'restore', gatewayId: 'gw', tBackup: 500 },
          hb(3000),
          { t: 30_000, who: 'collect', what: 'gw-access-log', gatewayId: 'gw', lockId: 'L2', requestId: 'r2', allowed: true, keyId: 'k1' },
        ),
        opts,
      );
      expect(v.violations.map((x) => [x.invariant, x.lines])).toEqual([['I1 one-time once', [1, 3, 6]]]);
      expect(v.violations[0]?.message).toContain('2 requests');
    });

    it("counts a lock's retry of the same request once, and a refused second present not at all", () => {
      const v = check(
        history(
          oneTime(0),
          hb(100),
          allow(1000, { requestId: 'r1' }),
          allow(1200, { allowed: false, code: 'KEY_USED', commandId: null, requestId: 'r2' }),
          { t: 30_000, who: 'collect', what: 'gw-access-log', gatewayId: 'gw', lockId: 'L1', requestId: 'r1', allowed: true, keyId: 'k1' },
          { t: 30_001, who: 'collect', what: 'gw-access-log', gatewayId: 'gw', lockId: 'L1', requestId: 'r1', allowed: true, keyId: 'k1' },
        ),
        opts,
      );
      expect(v.violations).toEqual([]);
      expect(v.checks['I1 one-time keys checked']).toBe(1);
    });

    it('does not ask a decision a restore lost (between the backup and the kill) to be in the access log', () => {
      const restored = (tBackup: number) => ({ t: 1500, who: 'gw', what: 'restore', gatewayId: 'gw', tBackup });
      const lost = history(issue(0), hb(100), allow(1000, { requestId: 'r1' }), restored(500), {
        t: 20_000,
        who: 'runner',
        what: 'healed',
        ok: true,
      });
      expect(check(lost, opts).violations).toEqual([]);
      expect(check(lost, opts).checks['I2 decisions a restore lost']).toBe(1);
      // a backup taken after the decision holds it: missing from the log is a violation
      const kept = history(issue(0), hb(100), allow(1000, { requestId: 'r1' }), restored(1100), {
        t: 20_000,
        who: 'runner',
        what: 'healed',
        ok: true,
      });
      expect(check(kept, opts).violations.map((x) => x.invariant)).toEqual(['I2 decision logged']);
    });
  });

  describe('privacy', () => {
    const staff = (t: number) => ({ ...issue(t), staff: true });
    const privacy = (t: number, on: boolean) => [
      { t, who: 'gw-fleet', what: 'privacy-ask', gatewayId: 'gw', lockId: 'L1', active: on },
      { t: t + 20, who: 'gw-fleet', what: 'privacy', gatewayId: 'gw', lockId: 'L1', active: on, privacy: on },
    ];
    it("reports a staff key allowed at a door after its lock had taken privacy on, with the lock's lines", () => {
      const v = check(history(staff(0), hb(100), ...privacy(1000, true), allow(2000), ...privacy(5000, false)), opts);
      expect(v.violations.map((x) => [x.invariant, x.lines])).toEqual([['I1 privacy', [4, 6, 1, 5]]]);
    });

    it('passes a staff key at another door, in flight when privacy went on, after it was asked off, or after the fleet restarted', () => {
      const v = check(
        history(
          staff(0),
          hb(100),
          allow(1010, { tSend: 990 }), // sent before the lock had taken privacy on
          ...privacy(1000, true),
          allow(2000, { lockId: 'L2' }),
          ...privacy(5000, false),
          allow(5100, { tSend: 5010 }),
          ...privacy(6000, true),
          { t: 7000, who: 'injector', what: 'fault', kind: 'kill-fleet', target: 'gw-fleet' },
          hb(7500),
          allow(8000),
        ),
        opts,
      );
      expect(v.violations).toEqual([]);
      expect(v.checks['I1 privacy-refused keys checked']).toBe(4);
    });

    it('reports a one-time key at a private door too, and passes an ordinary key there', () => {
      const v = check(
        history(
          { ...issue(0), oneTime: true },
          issue(0, 'k2'),
          hb(100),
          ...privacy(1000, true),
          allow(2000),
          allow(2100, { keyId: 'k2', commandId: 'c2' }),
        ),
        opts,
      );
      expect(v.violations.map((x) => x.invariant)).toEqual(['I1 privacy']);
    });
  });
});
