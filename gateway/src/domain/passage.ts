import type { Schedule, SiteMode } from '@tobira/shared';
import { inSchedule } from './schedule.js';

/**
 * Passage mode (docs/gateway.md "Passage mode"): a door held unlocked while
 * its schedule runs, for example a lobby 08:00-20:00 in the site's time zone.
 * Pure: the use case (app/passage.ts) reads the inputs, writes the result and
 * sends the commands.
 *
 * Whether the door should be held open now, checks in this order:
 *
 * | check                                        | answer                        |
 * |----------------------------------------------|-------------------------------|
 * | the door has no passage schedule             | no  (NO_PASSAGE)              |
 * | the site is in lockdown                      | no  (SITE_LOCKDOWN)           |
 * | the site is failing closed (CLOUD_STALE)     | no  (CLOUD_STALE)             |
 * | the guest inside has privacy on              | no  (PRIVACY_ACTIVE)          |
 * | now is outside the schedule                  | no  (OUTSIDE_SCHEDULE)        |
 * | otherwise                                    | yes                           |
 *
 * What to do at one lock, from whether it is held now (persisted) and
 * whether it should be:
 *
 * | held | should | action                                                         |
 * |------|--------|----------------------------------------------------------------|
 * | no   | no     | none                                                           |
 * | no   | yes    | start: PASSAGE_UNLOCK event, unlock command                    |
 * | yes  | yes    | renew: a fresh unlock command when the last is half-way through its hold (or unknown: after a restart) |
 * | yes  | no     | stop: PASSAGE_RELOCK event, lock command                       |
 *
 * Failing closed wins over the schedule: an unlock is only ever sent while
 * the gateway is fresh, and each one holds the bolt for `holdMs` at most, so a
 * gateway that stops renewing (crashed, cut off) leaves a door that relocks
 * by itself.
 */
export type PassageBlock = 'NO_PASSAGE' | 'SITE_LOCKDOWN' | 'CLOUD_STALE' | 'PRIVACY_ACTIVE' | 'OUTSIDE_SCHEDULE';

export interface PassageInput {
  readonly schedule: Schedule | null;
  readonly mode: SiteMode;
  /** Why ordinary keys are refused now (null: the site is in sync). */
  readonly failClosedReason: string | null;
  readonly privacy: boolean;
}

/** Invariant: `hold` is true only with a schedule running now, no lockdown, no privacy, and a gateway that is not failing closed. */
export function passageWanted(
  i: PassageInput,
  now: number,
): { readonly hold: true } | { readonly hold: false; readonly why: PassageBlock } {
  if (i.schedule === null) return { hold: false, why: 'NO_PASSAGE' };
  if (i.mode === 'lockdown') return { hold: false, why: 'SITE_LOCKDOWN' };
  if (i.failClosedReason !== null) return { hold: false, why: 'CLOUD_STALE' };
  if (i.privacy) return { hold: false, why: 'PRIVACY_ACTIVE' };
  if (!inSchedule(i.schedule, now)) return { hold: false, why: 'OUTSIDE_SCHEDULE' };
  return { hold: true };
}

export type PassageStep = 'none' | 'start' | 'renew' | 'stop';

/**
 * Invariant: 'start' and 'renew' only when `hold`; a held lock that should
 * not be is always stopped. `lastUnlockAt`: when this process last sent it an
 * unlock (null: never, e.g. after a restart).
 */
export function passageStep(held: boolean, hold: boolean, lastUnlockAt: number | null, now: number, renewAfterMs: number): PassageStep {
  if (!hold) return held ? 'stop' : 'none';
  if (!held) return 'start';
  return lastUnlockAt === null || now - lastUnlockAt >= renewAfterMs || now < lastUnlockAt ? 'renew' : 'none';
}
