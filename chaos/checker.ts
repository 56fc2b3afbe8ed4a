import type { Entry } from './history.js';

/**
 * The checker (Jepsen style): reads a run's history afterwards and reports
 * every violation of the invariants (docs/reliability.md) with
 * the history lines that prove it. Pure: the history in, the verdict out.
 *
 * Times: `t` is the runner's monotonic clock. A decision happened somewhere
 * between the request (`tSend`) and the answer (`t`); a violation is claimed
 * only when every point of that interval is past the bound, plus `slackMs`
 * for log lines read late.
 */
export interface CheckOptions {
  readonly offlineGraceSeconds: number;
  readonly slackMs?: number;
  /**
   * Slack on the revoke bound, counted from the revoke's commit (its upper bound). Small: a heartbeat's
   * `iat` is read before its seq and floored to the second, so a lease over a revoke the heartbeat does
   * not name ends at most `offlineGraceSeconds` after the commit; more slack would hide that race.
   */
  readonly revokeSlackMs?: number;
}

export interface Violation {
  readonly invariant: string;
  readonly message: string;
  /** history line numbers (`i`) that prove it */
  readonly lines: readonly number[];
}

export interface Verdict {
  readonly checks: Record<string, number>;
  readonly violations: readonly Violation[];
}

/** The gateway's CLOCK_SKEW_TOLERANCE_MS (gateway/src/domain/freshness.ts): how far trusted time may run ahead. */
export const CLOCK_TOLERANCE_MS = 30_000;

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const num = (v: unknown): number | null => (typeof v === 'number' ? v : null);

/** An allowed decision, from whichever source saw it, with the runner-time interval it happened in. */
interface Decision {
  readonly gw: string;
  readonly lockId: string;
  readonly keyId: string | null;
  readonly wrongPin: boolean;
  /** it happened at or after this runner time… */
  readonly tLo: number;
  /** …and at or before this one */
  readonly tHi: number;
  /** the runner's wall clock at `tLo` (never stepped) */
  readonly wallLo: number;
  readonly lines: number[];
  readonly source: 'answer' | 'access log';
  /** the request it answered (`gw/requestId`): a lock's retry of the same request is the same entry */
  readonly id: string;
}

/**
 * A lease renewal: a heartbeat the gateway applied (`MESSAGE_APPLIED`), or a heartbeat that found it
 * behind and counted once the gap was filled (`lease-settled`). A heartbeat answered `REPORT_IGNORED`
 * (behind) or `SEQ_CONFLICT` renewed nothing. Histories recorded before heartbeats carried a result count every line.
 */
export function isRenewal(e: Entry): boolean {
  if (e.what === 'lease-settled') return true;
  return e.what === 'heartbeat' && (e.result === undefined || e.result === 'applied');
}

export function check(history: readonly Entry[], o: CheckOptions): Verdict {
  const slack = o.slackMs ?? 2000;
  const revokeSlack = o.revokeSlackMs ?? 500;
  const graceMs = o.offlineGraceSeconds * 1000;
  const checks: Record<string, number> = {};
  const violations: Violation[] = [];
  const count = (name: string) => (checks[name] = (checks[name] ?? 0) + 1);
  const fail = (invariant: string, message: string, lines: number[]) => violations.push({ invariant, message, lines });
  // the runner's wall clock is never stepped: one offset maps its monotonic time to wall time
  const h0 = history[0];
  const wallOffset = h0 !== undefined ? h0.wall - h0.t : 0;

  // what the workload and the cloud show about each key
  const issued = new Map<string, Entry>();
  /** the earliest proof that a revoke had committed: its 2xx answer, or the poller seeing it `revoking`/`revoked` */
  const revokeCommitted = new Map<string, Entry>();
  const ackedRevoke = new Map<string, Entry>();
  const renewals = new Map<string, Entry[]>();
  const clockSets = new Map<string, Entry[]>();
  const allowedCommands = new Set<string>();
  /** presents the fleet answered, by gateway/requestId */
  const answered = new Map<string, Entry>();
  /** the earliest present of each gateway/lock/key (the access-log decisions of unanswered presents start after it) */
  const firstPresent = new Map<string, number>();
  const firstCommit = (keyId: string, e: Entry) => {
    const prev = revokeCommitted.get(keyId);
    if (prev === undefined || e.t < prev.t) revokeCommitted.set(keyId, e);
  };
  /** the seq each revoke took at its commit, from the cloud's own history (collected after the run) */
  const revokeSeq = new Map<string, Entry>();
  for (const e of history) {
    if (e.what === 'cloud-revoke' && typeof e.keyId === 'string' && typeof e.seq === 'number') revokeSeq.set(e.keyId, e);
    if (e.what === 'issue' && e.status === 202 && typeof e.keyId === 'string') issued.set(e.keyId, e);
    if (e.what === 'revoke' && (e.status === 202 || e.status === 200) && typeof e.keyId === 'string') firstCommit(e.keyId, e);
    if (e.what === 'key-status' && (e.status === 'revoking' || e.status === 'revoked') && typeof e.keyId === 'string')
      firstCommit(e.keyId, e);
    if (e.what === 'key-status' && e.status === 'revoked' && typeof e.keyId === 'string' && !ackedRevoke.has(e.keyId))
      ackedRevoke.set(e.keyId, e);
    if (isRenewal(e)) renewals.set(e.who, [...(renewals.get(e.who) ?? []), e]);
    if (e.what === 'clock-set') clockSets.set(e.who, [...(clockSets.get(e.who) ?? []), e]);
    if (e.what === 'present' && e.allowed === true && typeof e.commandId === 'string') allowedCommands.add(e.commandId);
    if (e.what === 'gw-access-log' && e.allowed === true && typeof e.commandId === 'string') allowedCommands.add(e.commandId);
    if (e.what === 'present' && typeof e.requestId === 'string') answered.set(`${String(e.gatewayId)}/${e.requestId}`, e);
    if (e.what === 'present') {
      const k = `${String(e.gatewayId)}/${String(e.lockId)}/${String(e.keyId)}`;
      const tSend = num(e.tSend) ?? e.t;
      if (!firstPresent.has(k)) firstPresent.set(k, tSend);
    }
  }
  // ---- restores: what a gateway committed between its backup and its kill is gone from its store
  const restores = new Map<string, { from: number; to: number; line: number }[]>();
  for (const e of history)
    if (e.what === 'restore' && typeof e.tBackup === 'number')
      restores.set(e.who, [...(restores.get(e.who) ?? []), { from: e.tBackup, to: e.t, line: e.i }]);
  /** The restore of `gw` whose lost span [backup, kill] meets [from, to], if any. */
  const lostToRestore = (gw: string, from: number, to: number) => (restores.get(gw) ?? []).find((r) => from <= r.to && to >= r.from);
  // ---- privacy, by the lock's own state: on from when the lock had taken it (and published it, before any later
  // request of that lock) until the off was asked, or the lock fleet was killed or started (a lock boots private off)
  const privacyOn = new Map<string, { from: number; to: number; lines: number[] }[]>();
  const openPrivacy = new Map<string, { from: number; lines: number[] }>();
  const closePrivacy = (k: string, t: number, line: number) => {
    const o = openPrivacy.get(k);
    if (o === undefined) return;
    openPrivacy.delete(k);
    privacyOn.set(k, [...(privacyOn.get(k) ?? []), { from: o.from, to: t, lines: [...o.lines, line] }]);
  };
  for (const e of history) {
    const k = `${String(e.gatewayId)}/${String(e.lockId)}`;
    if (e.what === 'privacy' && e.active === true && e.privacy === true && !openPrivacy.has(k))
      openPrivacy.set(k, { from: e.t, lines: [e.i] });
    if (e.what === 'privacy-ask' && e.active === false) closePrivacy(k, e.t, e.i);
    const fleetOf =
      e.what === 'fault' && typeof e.target === 'string' && e.target.endsWith('-fleet') ? e.target : e.what === 'start' ? e.who : null;
    if (fleetOf !== null && fleetOf.endsWith('-fleet'))
      for (const open of [...openPrivacy.keys()]) if (`${open.split('/')[0]}-fleet` === fleetOf) closePrivacy(open, e.t, e.i);
  }
  for (const [k, o] of openPrivacy) privacyOn.set(k, [...(privacyOn.get(k) ?? []), { from: o.from, to: Infinity, lines: o.lines }]);
  /** every distinct allowed request of each one-time key */
  const oneTimeUses = new Map<string, Map<string, number[]>>();

  /** The last lease renewal gateway `gw` logged before runner time `t`. */
  const lastRenewal = (gw: string, t: number): Entry | null => {
    let best: Entry | null = null;
    for (const h of renewals.get(gw) ?? []) if (h.t <= t) best = h;
    return best;
  };
  /** Whether gateway `gw`'s wall clock was off at any time in [from, to] (trusted time may then lag real time). */
  const clockOff = (gw: string, from: number, to: number): boolean => {
    let off = false;
    for (const c of clockSets.get(gw) ?? []) {
      if (c.t > to) break;
      const nowOff = c.offsetMs !== 0 || c.stopped === true;
      if (c.t >= from && nowOff) return true;
      off = nowOff;
    }
    return off;
  };

  const checkDecision = (d: Decision): void => {
    const { gw, keyId } = d;
    const via = d.source === 'answer' ? '' : ' (seen only in its access log)';
    count('I1 allowed decisions checked');
    if (d.source === 'access log') count('I1 access-log-only decisions checked');
    if (d.wrongPin || keyId === null) {
      fail('I1 no grant', `${gw}/${d.lockId} opened for a PIN no key was issued with${via}`, d.lines);
      return;
    }
    const iss = issued.get(keyId);
    if (iss === undefined) {
      fail('I1 no grant', `${gw} opened for key ${keyId}, which the cloud never accepted${via}`, d.lines);
      return;
    }
    if (iss.oneTime === true) {
      const uses = oneTimeUses.get(keyId) ?? new Map<string, number[]>();
      uses.set(d.id, [...(uses.get(d.id) ?? []), ...d.lines]);
      oneTimeUses.set(keyId, uses);
    }
    // privacy keeps out staff and one-time keys (privacyRefuses, gateway/src/domain/decide.ts)
    if (iss.oneTime === true || iss.staff === true) {
      count('I1 privacy-refused keys checked');
      const on = (privacyOn.get(`${gw}/${d.lockId}`) ?? []).find((p) => p.from < d.tLo && d.tHi < p.to);
      if (on !== undefined)
        fail(
          'I1 privacy',
          `${gw}/${d.lockId} opened for ${iss.oneTime === true ? 'one-time' : 'staff'} key ${keyId} ${Math.round(d.tLo - on.from)} ms after the lock had taken privacy on, before it was turned off${via}`,
          [...on.lines, iss.i, ...d.lines],
        );
    }
    // trusted time may run ahead of real time by up to the gateway's clock tolerance (its ceiling: the last
    // proven cloud time carried forward plus 30 s), never more: a key may open that much early, not earlier
    const validFrom = num(iss.validFrom);
    const wallHi = d.wallLo + (d.tHi - d.tLo);
    if (validFrom !== null && Number.isFinite(wallHi) && wallHi < validFrom - CLOCK_TOLERANCE_MS - slack)
      fail(
        'I1 not yet valid',
        `${gw} opened for key ${keyId} ${Math.round(validFrom - wallHi)} ms before its window began (real time; tolerance ${CLOCK_TOLERANCE_MS} ms)${via}`,
        [iss.i, ...d.lines],
      );
    // a scheduled key's one window (absolute ms, recorded at issue): the same tolerance early, none late
    const windowFrom = num(iss.scheduleFrom);
    const windowUntil = num(iss.scheduleUntil);
    if (windowFrom !== null && windowUntil !== null && Number.isFinite(wallHi)) {
      count('I1 scheduled keys checked');
      if (wallHi < windowFrom - CLOCK_TOLERANCE_MS - slack || d.wallLo > windowUntil + slack)
        fail(
          'I1 outside schedule',
          `${gw} opened for key ${keyId} outside its schedule: ${wallHi < windowFrom ? `${Math.round(windowFrom - wallHi)} ms before` : `${Math.round(d.wallLo - windowUntil)} ms after`} its window (real time; tolerance ${CLOCK_TOLERANCE_MS} ms early)${via}`,
          [iss.i, ...d.lines],
        );
    }
    const validUntil = num(iss.validUntil);
    if (validUntil !== null && d.wallLo > validUntil + slack)
      fail('I1 expired', `${gw} opened for key ${keyId} ${d.wallLo - validUntil} ms after its window ended (real time)${via}`, [
        iss.i,
        ...d.lines,
      ]);
    const acked = ackedRevoke.get(keyId);
    if (acked !== undefined && d.tLo > acked.t)
      fail('I1 revoke acked', `${gw} opened for key ${keyId} after the cloud showed its revoke acknowledged${via}`, [acked.i, ...d.lines]);
    const rev = revokeCommitted.get(keyId);
    // with its wall clock right, the gateway's trusted time is real time, so a lease from a heartbeat older than the
    // commit ends within the grace of it; with the clock off, trusted time may lag by a heartbeat's transit, and
    // only the offline-grace bound below holds
    if (rev !== undefined && d.tLo > rev.t + graceMs + revokeSlack && !clockOff(gw, rev.t - graceMs, d.tLo))
      fail(
        'I1 revoke lag',
        `${gw} opened for key ${keyId} ${Math.round(d.tLo - rev.t)} ms after its revoke was committed (> offlineGraceSeconds: a lease renewed over a revoke it never applied)${via}`,
        [rev.i, ...d.lines],
      );
    // the gateway said (renewing its lease) it had applied everything up to the revoke's seq before this decision began
    const rs = revokeSeq.get(keyId);
    const applied =
      rs === undefined
        ? undefined
        : (renewals.get(gw) ?? []).find((r) => r.t < d.tLo && typeof r.appliedSeq === 'number' && r.appliedSeq >= Number(rs.seq));
    if (rs !== undefined && applied !== undefined)
      fail(
        'I1 revoke applied before',
        `${gw} opened for key ${keyId} after it reported applied seq ${String(applied.appliedSeq)} >= its revoke's seq ${String(rs.seq)}${via}`,
        [rs.i, applied.i, ...d.lines],
      );
    const hb = lastRenewal(gw, d.tHi);
    if (hb === null || d.tLo > hb.t + graceMs + slack)
      fail(
        'I1 offline grace',
        hb === null
          ? `${gw} opened for key ${keyId} before it ever had a lease${via}`
          : `${gw} opened for key ${keyId} ${Math.round(d.tLo - hb.t)} ms of real time after its last lease renewal (grace ${graceMs} ms), whatever its clock said${via}`,
        hb === null ? d.lines : [hb.i, ...d.lines],
      );
  };

  for (const e of history) {
    // ---- I1 at the lease: a heartbeat renews only when everything it names was applied
    if (isRenewal(e) && typeof e.lastSeq === 'number' && typeof e.appliedSeq === 'number') {
      count('I1 lease renewals checked');
      if (e.appliedSeq < e.lastSeq)
        fail(
          'I1 lease over gap',
          `${e.who} extended its lease from a heartbeat naming seq ${e.lastSeq} with only seq ${e.appliedSeq} applied (a revoke held back could stay open)`,
          [e.i],
        );
    }
    // ---- I1 at the door: every unlock the gateway answered as allowed
    if (e.what === 'present' && e.allowed === true) {
      const tSend = num(e.tSend) ?? e.t;
      checkDecision({
        gw: str(e.gatewayId) ?? '?',
        lockId: String(e.lockId),
        keyId: str(e.keyId),
        wrongPin: e.kind === 'wrong',
        tLo: tSend,
        tHi: e.t,
        wallLo: num(e.wallSend) ?? tSend + wallOffset,
        lines: [e.i],
        source: 'answer',
        id: typeof e.requestId === 'string' ? `${String(e.gatewayId)}/${e.requestId}` : `line ${e.i}`,
      });
    }
    // ---- I1 at the lock: every executed unlock comes from an allowed decision
    if (e.what === 'lock-command' && e.result === 'executed') {
      count('I1 lock unlocks checked');
      const lost = lostToRestore(String(e.gatewayId), e.t, e.t);
      if (lost !== undefined && !(typeof e.commandId === 'string' && allowedCommands.has(e.commandId)))
        count('I1 lock unlocks whose decision a restore lost');
      else if (typeof e.commandId !== 'string' || !allowedCommands.has(e.commandId))
        fail('I1 lock', `lock ${String(e.lockId)} executed command ${String(e.commandId)} that no allowed decision names`, [e.i]);
    }
    // ---- fail-closed is reported: health never says fresh when the lease must have run out
    if (e.what === 'health' && e.failClosedReason === null && e.ok === true) {
      count('health reports checked');
      const gw = str(e.gatewayId) ?? '?';
      const tReq = num(e.tSend) ?? e.t;
      const hb = lastRenewal(gw, e.t);
      if (hb === null || tReq > hb.t + graceMs + slack)
        fail('fail-closed reported', `${gw} /healthz said fresh ${hb ? Math.round(tReq - hb.t) : '∞'} ms after its last lease renewal`, [
          ...(hb ? [hb.i] : []),
          e.i,
        ]);
    }
  }

  // ---- I1 for the decisions only a gateway's access log shows (the lock's answer was lost or came too late).
  // Rows are in commit order: a row was decided after every earlier row's request was sent, and before every
  // later row's answer that carried its decision; and after its own request (matched by request id) or, with
  // none, after the first present of its key at its lock.
  const byGw = new Map<string, Entry[]>();
  for (const e of history) if (e.what === 'gw-access-log') byGw.set(String(e.gatewayId), [...(byGw.get(String(e.gatewayId)) ?? []), e]);
  for (const [gw, rows] of byGw) {
    const match = rows.map((r) => (typeof r.requestId === 'string' ? (answered.get(`${gw}/${r.requestId}`) ?? null) : null));
    const lo: number[] = [];
    let run = 0;
    for (const m of match) {
      if (m !== null) run = Math.max(run, num(m.tSend) ?? m.t);
      lo.push(run);
    }
    const hi: number[] = new Array<number>(rows.length).fill(Infinity);
    let after = Infinity;
    for (let j = rows.length - 1; j >= 0; j--) {
      const m = match[j] ?? null;
      // only an answer that carried the decision bounds it: a timeout may be decided later
      if (m !== null && m.decided === true) after = Math.min(after, m.t);
      hi[j] = Math.min(after, rows[j]?.t ?? Infinity);
    }
    rows.forEach((r, j) => {
      if (r.allowed !== true) return;
      const m = match[j] ?? null;
      if (m !== null && m.allowed === true) return; // checked with its answer above
      const first = firstPresent.get(`${gw}/${String(r.lockId)}/${String(r.keyId)}`) ?? 0;
      const tLo = m !== null ? Math.max(num(m.tSend) ?? m.t, lo[j] ?? 0) : Math.max(lo[j] ?? 0, first);
      const tHi = m !== null && m.decided === true ? m.t : (hi[j] ?? r.t);
      checkDecision({
        gw,
        lockId: String(r.lockId),
        keyId: str(r.keyId),
        wrongPin: false,
        tLo,
        tHi,
        wallLo: tLo + wallOffset,
        lines: m !== null ? [m.i, r.i] : [r.i],
        source: 'access log',
        id: typeof r.requestId === 'string' ? `${gw}/${r.requestId}` : `line ${r.i}`,
      });
    });
  }

  // ---- I1 one-time once: a one-time key opens for one request over the whole run, whatever restarts or restores
  // the gateway went through (a lock's retry of that same request is the same entry)
  for (const [keyId, uses] of oneTimeUses) {
    count('I1 one-time keys checked');
    if (uses.size > 1)
      fail('I1 one-time once', `one-time key ${keyId} was allowed for ${uses.size} requests (${[...uses.keys()].join(', ')})`, [
        ...(issued.get(keyId) ? [issued.get(keyId)?.i ?? 0] : []),
        ...[...uses.values()].flat(),
      ]);
  }

  // no process dies by itself: a crash is a finding whatever the invariants say
  for (const e of history)
    if (e.what === 'exit') {
      count('processes that exited by themselves');
      fail('crash', `${e.who} exited by itself (code ${String(e.code)}, signal ${String(e.signal)}): ${firstLines(e.stderr)}`, [e.i]);
    }

  // ---- after healing
  const healed = history.find((e) => e.what === 'healed');
  if (healed === undefined) {
    if (history.some((e) => e.what === 'heal')) fail('heal', 'the system did not settle after the faults stopped', []);
    return { checks, violations };
  }
  if (healed.ok !== true) fail('heal', `the system did not settle within the heal timeout: ${String(healed.reason)}`, [healed.i]);

  // I2: every decision the gateway logged is in the cloud audit exactly once
  const audit = new Map<string, Entry[]>();
  for (const e of history)
    if (e.what === 'cloud-audit' && typeof e.eventId === 'string') audit.set(e.eventId, [...(audit.get(e.eventId) ?? []), e]);
  const gwLog = new Map<string, Entry>();
  for (const e of history) {
    if (e.what !== 'gw-access-log') continue;
    count('I2 gateway decisions checked');
    if (typeof e.requestId === 'string') gwLog.set(`${String(e.gatewayId)}/${e.requestId}`, e);
    const a = audit.get(String(e.eventId)) ?? [];
    if (a.length !== 1)
      fail('I2 audit exactly once', `decision ${String(e.eventId)} of ${String(e.gatewayId)} is in the cloud audit ${a.length} times`, [
        e.i,
        ...a.map((x) => x.i),
      ]);
  }
  for (const [id, a] of audit)
    if (a.length > 1)
      fail(
        'I2 audit exactly once',
        `event ${id} appears ${a.length} times in the cloud audit`,
        a.map((x) => x.i),
      );
  // every decision a lock received was logged by its gateway
  for (const e of history) {
    if (e.what !== 'present' || e.decided !== true || typeof e.requestId !== 'string') continue;
    count('I2 lock decisions traced');
    // decided between a backup and the restore of it: the gateway's log of it went with the store
    if (!gwLog.has(`${String(e.gatewayId)}/${e.requestId}`) && lostToRestore(String(e.gatewayId), num(e.tSend) ?? e.t, e.t) !== undefined)
      count('I2 decisions a restore lost');
    else if (!gwLog.has(`${String(e.gatewayId)}/${e.requestId}`))
      fail('I2 decision logged', `a decision a lock received (${e.requestId}) is not in ${String(e.gatewayId)}'s access log`, [e.i]);
  }

  // key sets: acked revokes applied, active keys delivered, sets equal
  const cloudKeys = history.filter((e) => e.what === 'cloud-key');
  const gwKeys = new Map<string, Entry>();
  for (const e of history) if (e.what === 'gw-key') gwKeys.set(`${String(e.gatewayId)}/${String(e.keyId)}`, e);
  for (const k of cloudKeys) {
    const g = gwKeys.get(`${String(k.gatewayId)}/${String(k.keyId)}`);
    if (k.status === 'revoked') {
      count('acked revokes applied');
      if (g !== undefined && g.status === 'active')
        fail('revoke applied', `key ${String(k.keyId)} is revoked in the cloud but active on ${String(k.gatewayId)}`, [k.i, g.i]);
    } else if (k.status === 'active') {
      count('active keys delivered');
      if (g === undefined || g.status !== 'active')
        fail(
          'key delivered',
          `key ${String(k.keyId)} is active in the cloud but ${g ? String(g.status) : 'missing'} on ${String(k.gatewayId)}`,
          [k.i, ...(g ? [g.i] : [])],
        );
    } else if (k.status === 'issuing' || k.status === 'revoking') {
      count('keys settled');
      const gwv = history.find((x) => x.what === 'cloud-gateway' && x.gatewayId === k.gatewayId);
      if (!(gwv !== undefined && typeof gwv.deadLetters === 'number' && gwv.deadLetters > 0))
        fail('stuck without dead letter', `key ${String(k.keyId)} is still ${k.status} after healing and no dead letter shows why`, [
          k.i,
          ...(gwv ? [gwv.i] : []),
        ]);
    }
  }
  for (const g of gwKeys.values()) {
    if (g.status !== 'active') continue;
    count('gateway keys matched');
    const k = cloudKeys.find((x) => x.gatewayId === g.gatewayId && x.keyId === g.keyId);
    if (k === undefined || (k.status !== 'active' && k.status !== 'expired'))
      fail(
        'key sets equal',
        `key ${String(g.keyId)} is active on ${String(g.gatewayId)} but ${k ? String(k.status) : 'unknown'} in the cloud`,
        [g.i, ...(k ? [k.i] : [])],
      );
  }
  // no seq handed out and never applied without a visible dead letter
  for (const c of history.filter((e) => e.what === 'cloud-gateway')) {
    count('outbox settled');
    const s = history.find((e) => e.what === 'gw-settings' && e.gatewayId === c.gatewayId);
    const behind = s !== undefined && typeof c.lastSeq === 'number' && typeof s.appliedSeq === 'number' && s.appliedSeq < c.lastSeq;
    if (behind && !(typeof c.deadLetters === 'number' && c.deadLetters > 0))
      fail(
        'outbox settled',
        `${String(c.gatewayId)} applied seq ${String(s?.appliedSeq)} < ${String(c.lastSeq)} handed out, no dead letter`,
        [c.i, ...(s ? [s.i] : [])],
      );
  }
  return { checks, violations };
}

/** The head of a crash's stderr, enough to name it in a violation. */
export function firstLines(stderr: unknown, n = 6): string {
  return typeof stderr === 'string'
    ? stderr
        .split('\n')
        .filter((l) => l.trim() !== '')
        .slice(0, n)
        .join(' | ')
    : '';
}
