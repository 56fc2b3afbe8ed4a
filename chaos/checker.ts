import type { Entry } from './history.js';

/**
 * The checker (Jepsen style): reads a run's history afterwards and reports
 * every violation of the invariants (DESIGN.md §2, docs/reliability.md) with
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

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const num = (v: unknown): number | null => (typeof v === 'number' ? v : null);

export function check(history: readonly Entry[], o: CheckOptions): Verdict {
  const slack = o.slackMs ?? 2000;
  const graceMs = o.offlineGraceSeconds * 1000;
  const checks: Record<string, number> = {};
  const violations: Violation[] = [];
  const count = (name: string) => (checks[name] = (checks[name] ?? 0) + 1);
  const fail = (invariant: string, message: string, lines: number[]) => violations.push({ invariant, message, lines });

  // what the workload knows about each key
  const issued = new Map<string, Entry>();
  const revokeAccepted = new Map<string, Entry>();
  const ackedRevoke = new Map<string, Entry>();
  const heartbeats = new Map<string, Entry[]>();
  const allowedCommands = new Set<string>();
  for (const e of history) {
    if (e.what === 'issue' && e.status === 202 && typeof e.keyId === 'string') issued.set(e.keyId, e);
    if (e.what === 'revoke' && (e.status === 202 || e.status === 200) && typeof e.keyId === 'string' && !revokeAccepted.has(e.keyId))
      revokeAccepted.set(e.keyId, e);
    if (e.what === 'key-status' && e.status === 'revoked' && typeof e.keyId === 'string' && !ackedRevoke.has(e.keyId))
      ackedRevoke.set(e.keyId, e);
    if (e.what === 'heartbeat') {
      const list = heartbeats.get(e.who) ?? [];
      list.push(e);
      heartbeats.set(e.who, list);
    }
    if (e.what === 'present' && e.allowed === true && typeof e.commandId === 'string') allowedCommands.add(e.commandId);
    if (e.what === 'gw-access-log' && e.allowed === true && typeof e.commandId === 'string') allowedCommands.add(e.commandId);
  }
  /** The last heartbeat gateway `gw` logged before runner time `t`. */
  const lastHeartbeat = (gw: string, t: number): Entry | null => {
    const list = heartbeats.get(gw) ?? [];
    let best: Entry | null = null;
    for (const h of list) if (h.t <= t) best = h;
    return best;
  };

  for (const e of history) {
    // ---- I1 at the door: every unlock the gateway allowed
    if (e.what === 'present' && e.allowed === true) {
      const gw = str(e.gatewayId) ?? '?';
      const tSend = num(e.tSend) ?? e.t;
      const keyId = str(e.keyId);
      count('I1 allowed decisions checked');
      if (e.kind === 'wrong' || keyId === null) {
        fail('I1 no grant', `${gw}/${String(e.lockId)} opened for a PIN no key was issued with`, [e.i]);
        continue;
      }
      const iss = issued.get(keyId);
      if (iss === undefined) {
        fail('I1 no grant', `${gw} opened for key ${keyId}, which the cloud never accepted`, [e.i]);
        continue;
      }
      const validUntil = num(iss.validUntil);
      const wallSend = num(e.wallSend);
      if (validUntil !== null && wallSend !== null && wallSend > validUntil + slack)
        fail('I1 expired', `${gw} opened for key ${keyId} ${wallSend - validUntil} ms after its window ended (real time)`, [iss.i, e.i]);
      const acked = ackedRevoke.get(keyId);
      if (acked !== undefined && tSend > acked.t)
        fail('I1 revoke acked', `${gw} opened for key ${keyId} after the cloud showed its revoke acknowledged`, [acked.i, e.i]);
      const rev = revokeAccepted.get(keyId);
      if (rev !== undefined && tSend > rev.t + graceMs + slack)
        fail(
          'I1 revoke lag',
          `${gw} opened for key ${keyId} ${Math.round(tSend - rev.t)} ms after its revoke was committed (> offlineGraceSeconds: a lease renewed over a revoke it never applied)`,
          [rev.i, e.i],
        );
      const hb = lastHeartbeat(gw, e.t);
      if (hb === null || tSend > hb.t + graceMs + slack)
        fail(
          'I1 offline grace',
          hb === null
            ? `${gw} opened for key ${keyId} before it ever had a heartbeat`
            : `${gw} opened for key ${keyId} ${Math.round(tSend - hb.t)} ms of real time after its last heartbeat (grace ${graceMs} ms), whatever its clock said`,
          hb === null ? [e.i] : [hb.i, e.i],
        );
    }
    // ---- I1 at the lock: every executed unlock comes from an allowed decision
    if (e.what === 'lock-command' && e.result === 'executed') {
      count('I1 lock unlocks checked');
      if (typeof e.commandId !== 'string' || !allowedCommands.has(e.commandId))
        fail('I1 lock', `lock ${String(e.lockId)} executed command ${String(e.commandId)} that no allowed decision names`, [e.i]);
    }
    // ---- fail-closed is reported: health never says fresh when the lease must have run out
    if (e.what === 'health' && e.failClosedReason === null && e.ok === true) {
      count('health reports checked');
      const gw = str(e.gatewayId) ?? '?';
      const tReq = num(e.tSend) ?? e.t;
      const hb = lastHeartbeat(gw, e.t);
      if (hb === null || tReq > hb.t + graceMs + slack)
        fail('fail-closed reported', `${gw} /healthz said fresh ${hb ? Math.round(tReq - hb.t) : '∞'} ms after its last heartbeat`, [
          ...(hb ? [hb.i] : []),
          e.i,
        ]);
    }
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
    if (!gwLog.has(`${String(e.gatewayId)}/${e.requestId}`))
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
