import {
  applied,
  conflict,
  noop,
  refused,
  type CorrelationId,
  type DoorId,
  type Outcome,
  type PersonId,
  type SiteId,
} from '@tobira/shared';
import {
  DEFAULT_CANCELLATION_POLICY,
  refundFor,
  type CancelReason,
  type CancellationPolicy,
  type Paid,
  type RefundSplit,
} from './cancellation-policy.js';
import { DEFAULT_MAX_NIGHTS, daysUntilCheckIn, nightsOf, zonedInstant, type IsoDate } from './nights.js';
import { STAY_TRANSITIONS, stayNoopOf, stayTransitionOf, type StayEvent, type StayStatus } from './stay-states.js';

/** A room: a named set of doors at a site that one stay books for its nights. */
export interface Room {
  readonly id: string;
  readonly siteId: SiteId;
  readonly name: string;
  readonly doors: readonly DoorId[];
}

/** A site's stay settings (`site_stay_settings`); `DEFAULT_STAY_SETTINGS` fills what a site has not set. */
export interface SiteStaySettings {
  readonly siteId: SiteId;
  /** IANA zone of the site: check-in/out dates and times are wall-clock there. */
  readonly timeZone: string;
  /** How long a pending stay holds its room waiting for payment. */
  readonly holdMinutes: number;
  /** `HH:MM` local */
  readonly checkInTime: string;
  readonly checkOutTime: string;
  /** Doors every stay at the site opens as well as its room's (lobby, gate). */
  readonly sharedDoors: readonly DoorId[];
  readonly cancellationPolicy: CancellationPolicy;
  /** ISO 4217, lower case as Stripe writes it */
  readonly currency: string;
  readonly maxNights: number;
  /** The front desk may sell walk-in day passes (check-in gate WALK_IN_NOT_ALLOWED); off unless set. */
  readonly walkInsAllowed: boolean;
}

export const DEFAULT_HOLD_MINUTES = 30;

/** A site that has set nothing: 30-minute hold, in at 15:00, out at 10:00, the default policy, yen. */
export function defaultStaySettings(siteId: SiteId, timeZone: string): SiteStaySettings {
  return {
    siteId,
    timeZone,
    holdMinutes: DEFAULT_HOLD_MINUTES,
    checkInTime: '15:00',
    checkOutTime: '10:00',
    sharedDoors: [],
    cancellationPolicy: DEFAULT_CANCELLATION_POLICY,
    currency: 'jpy',
    maxNights: DEFAULT_MAX_NIGHTS,
    walkInsAllowed: false,
  };
}

export interface Stay {
  readonly id: string;
  readonly siteId: SiteId;
  readonly roomId: string;
  readonly personId: PersonId;
  readonly checkIn: IsoDate;
  readonly checkOut: IsoDate;
  readonly nights: readonly IsoDate[];
  /** The whole price, minor units */
  readonly amount: number;
  readonly currency: string;
  /** The part of `amount` paid as a deposit (its own payment row, purpose `stay_deposit`); 0 for none. */
  readonly deposit: number;
  readonly status: StayStatus;
  /** Compare-and-set counter: grows on every write. */
  readonly version: number;
  /** While pending: when the hold on the room ends. */
  readonly holdUntil: number;
  /** The entry key issued for the stay, once confirmed. */
  readonly keyId: string | null;
  /** The guest credential chosen at booking, as its keyed digest only; null: a random PIN at confirmation. */
  readonly guestCredential: GuestCredentialDigest | null;
  readonly cancelReason: CancelReason | null;
  /** A members' booking: the membership it was booked under (its end cancels the stay); null or absent: none. */
  readonly membershipId?: string | null;
  readonly lastCode: string;
  readonly cid: CorrelationId;
  readonly createdAt: number;
  readonly updatedAt: number;
}

/** A credential kept as its digest with the pepper of the gateway the stay's doors are behind. */
export interface GuestCredentialDigest {
  readonly type: 'pin' | 'card';
  readonly digest: string;
}

/** What the key verb is asked to issue for a confirmed stay (credential and gateway are the use case's). */
export interface StayKeyRequest {
  readonly keyId: string;
  readonly personId: PersonId;
  readonly doors: readonly DoorId[];
  readonly validFrom: number;
  readonly validUntil: number;
}

export type StayNotice = 'stay_booked' | 'stay_confirmed' | 'stay_failed' | 'stay_expired' | 'stay_cancelled' | 'stay_checked_out';

/**
 * What a stay verb asks of the rest of the system, in the transaction of the
 * change (`release_nights`, `revoke_key`) or through the billing queue
 * (`cancel_intents`, `refund`, `issue_key`, `notify`).
 */
export type StayEffect =
  | { readonly type: 'reserve_nights'; readonly roomId: string; readonly nights: readonly IsoDate[] }
  | { readonly type: 'release_nights' }
  | { readonly type: 'create_intents'; readonly payments: readonly { readonly purpose: PaymentPurpose; readonly amount: number }[] }
  | { readonly type: 'cancel_intents' }
  | { readonly type: 'issue_key'; readonly key: StayKeyRequest }
  | { readonly type: 'revoke_key'; readonly keyId: string; readonly reason: 'stay_cancelled' | 'stay_checked_out' }
  | { readonly type: 'refund'; readonly split: RefundSplit }
  | { readonly type: 'notify'; readonly notice: StayNotice; readonly dedupeKey: string };

export type PaymentPurpose = 'stay_balance' | 'stay_deposit';

export type StayOutcome = Outcome<Stay, StayEffect>;

/** The history event of an applied outcome, read back from the state table (codes are unique per row). */
export function stayEventOfCode(code: string): StayEvent {
  const row = STAY_TRANSITIONS.find((r) => r.code === code);
  if (!row) throw new Error(`no stay transition has code ${code}`);
  return row.event;
}

/** The usual shape of a verb on an existing stay: noop row, else the transition, else refused. */
function step(
  s: Stay | null,
  event: StayEvent,
  patch: Partial<Stay>,
  cid: CorrelationId,
  now: number,
  emits: (next: Stay) => readonly StayEffect[],
): StayOutcome {
  if (!s) return refused('STAY_NOT_FOUND');
  const same = stayNoopOf(s.status, event);
  if (same) return noop(same.code, s);
  const row = stayTransitionOf(s.status, event);
  if (!row) return refused('INVALID_TRANSITION', `${event} from ${s.status}`);
  const next: Stay = { ...s, ...patch, status: row.to, version: s.version + 1, lastCode: row.code, cid, updatedAt: now };
  return applied(row.code, next, emits(next));
}

/** Check-in and check-out instants of a stay at its site. */
export function stayWindow(s: Pick<Stay, 'checkIn' | 'checkOut'>, settings: SiteStaySettings): { validFrom: number; validUntil: number } {
  return {
    validFrom: zonedInstant(s.checkIn, settings.checkInTime, settings.timeZone),
    validUntil: zonedInstant(s.checkOut, settings.checkOutTime, settings.timeZone),
  };
}

// ---------------------------------------------------------------- book

export interface BookStayCommand {
  readonly stayId: string;
  readonly personId: PersonId;
  readonly room: Room;
  readonly settings: SiteStaySettings;
  readonly checkIn: IsoDate;
  readonly checkOut: IsoDate;
  readonly amount: number;
  readonly currency: string;
  readonly deposit: number;
  /** Absent or null: none chosen, a random PIN at confirmation. */
  readonly guestCredential?: GuestCredentialDigest | null;
  /** A members' booking: the membership it is booked under (checked living by the use case). */
  readonly membershipId?: string | null;
  readonly cid: CorrelationId;
}

function sameBooking(s: Stay, c: BookStayCommand): boolean {
  return (
    s.personId === c.personId &&
    s.roomId === c.room.id &&
    s.checkIn === c.checkIn &&
    s.checkOut === c.checkOut &&
    s.amount === c.amount &&
    s.currency === c.currency &&
    s.deposit === c.deposit &&
    s.guestCredential?.type === c.guestCredential?.type &&
    s.guestCredential?.digest === c.guestCredential?.digest &&
    (s.membershipId ?? null) === (c.membershipId ?? null)
  );
}

/** The payments a booking creates: the deposit (when there is one) and the rest as the balance. */
export function paymentsOf(amount: number, deposit: number): { purpose: PaymentPurpose; amount: number }[] {
  const out: { purpose: PaymentPurpose; amount: number }[] = [];
  if (deposit > 0) out.push({ purpose: 'stay_deposit', amount: deposit });
  if (amount - deposit > 0) out.push({ purpose: 'stay_balance', amount: amount - deposit });
  return out;
}

/**
 * Book: a new stay starts `pending`, holding its room's nights until
 * `holdUntil`. Invariant: an existing stay id is never overwritten (same
 * booking → noop, other content → conflict); the nights are a real, bounded
 * range that has not ended.
 */
export function bookStay(existing: Stay | null, cmd: BookStayCommand, now: number): StayOutcome {
  if (existing) return sameBooking(existing, cmd) ? noop('STAY_ALREADY_BOOKED', existing) : conflict('STAY_ALREADY_EXISTS', existing);
  if (cmd.room.siteId !== cmd.settings.siteId) return refused('ROOM_NOT_FOUND', 'the room is not at this site');
  if (!Number.isSafeInteger(cmd.amount) || cmd.amount <= 0)
    return refused('STAY_PRICE_INVALID', 'amount must be a positive integer in minor units');
  if (!Number.isSafeInteger(cmd.deposit) || cmd.deposit < 0 || cmd.deposit > cmd.amount) {
    return refused('STAY_PRICE_INVALID', 'deposit must be an integer from 0 to amount');
  }
  if (cmd.currency !== cmd.settings.currency) return refused('STAY_CURRENCY_MISMATCH', `the site charges in ${cmd.settings.currency}`);
  const nights = nightsOf(cmd.checkIn, cmd.checkOut, cmd.settings.maxNights);
  if (nights.status === 'refused') return refused(nights.code, nights.detail);
  if (stayWindow(cmd, cmd.settings).validUntil <= now) return refused('STAY_DATES_INVALID', 'the stay has already ended');
  const row = stayTransitionOf(null, 'book');
  if (!row) throw new Error('stay table has no book row');
  const stay: Stay = {
    id: cmd.stayId,
    siteId: cmd.settings.siteId,
    roomId: cmd.room.id,
    personId: cmd.personId,
    checkIn: cmd.checkIn,
    checkOut: cmd.checkOut,
    nights: nights.value,
    amount: cmd.amount,
    currency: cmd.currency,
    deposit: cmd.deposit,
    status: row.to,
    version: 1,
    holdUntil: now + cmd.settings.holdMinutes * 60_000,
    keyId: null,
    guestCredential: cmd.guestCredential ?? null,
    cancelReason: null,
    membershipId: cmd.membershipId ?? null,
    lastCode: row.code,
    cid: cmd.cid,
    createdAt: now,
    updatedAt: now,
  };
  return applied(row.code, stay, [
    { type: 'reserve_nights', roomId: stay.roomId, nights: stay.nights },
    { type: 'create_intents', payments: paymentsOf(stay.amount, stay.deposit) },
  ]);
}

// ---------------------------------------------------------------- confirm

export interface ConfirmStayCommand {
  readonly room: Room;
  readonly settings: SiteStaySettings;
  /** Net money settled for the stay, from the payments ledger (never from the browser). */
  readonly paid: Paid;
  /** Id for the key the confirmation issues (ids are arguments, not made in the domain). */
  readonly keyId: string;
  readonly cid: CorrelationId;
}

/**
 * Confirm: once the ledger holds the whole price, `pending` → `confirmed`
 * and the key is asked for: check-in to check-out at the site's times, for
 * the room's doors and the site's shared doors. Invariant: never confirmed
 * on less money than the price; money for a stay that already ended is
 * refused (`PAYMENT_AFTER_STAY_ENDED`) so the caller refunds it.
 */
export function confirmStay(s: Stay | null, cmd: ConfirmStayCommand, now: number): StayOutcome {
  if (!s) return refused('STAY_NOT_FOUND');
  if (s.status === 'failed' || s.status === 'expired' || s.status === 'cancelled') {
    return refused('PAYMENT_AFTER_STAY_ENDED', `the stay is ${s.status}: refund what was paid`);
  }
  if (s.status === 'pending' && cmd.paid.deposit + cmd.paid.balance < s.amount) return noop('STAY_BALANCE_DUE', s);
  if (cmd.room.id !== s.roomId) return refused('ROOM_NOT_FOUND', 'not the room of the stay');
  const w = stayWindow(s, cmd.settings);
  return step(s, 'payment_settled', { keyId: cmd.keyId }, cmd.cid, now, (next) => [
    {
      type: 'issue_key',
      key: {
        keyId: cmd.keyId,
        personId: next.personId,
        doors: [...new Set([...cmd.room.doors, ...cmd.settings.sharedDoors])],
        validFrom: w.validFrom,
        validUntil: w.validUntil,
      },
    },
    { type: 'notify', notice: 'stay_confirmed', dedupeKey: `stay_confirmed:${next.id}` },
  ]);
}

// ---------------------------------------------------------------- fail / expire

export interface EndPendingCommand {
  /** Net money settled for the stay, from the ledger: a stay that was never delivered gives all of it back. */
  readonly paid: Paid;
  readonly cid: CorrelationId;
}

/**
 * What a stay that ends without being delivered (failed, expired) gives back: everything that was paid. The
 * cancellation policy prices a guest's change of mind; a stay that never got its key was not delivered, and
 * the site keeps nothing of it.
 */
export function refundAllOf(paid: Paid): RefundSplit {
  return { fee: 0, deposit: paid.deposit, balance: paid.balance, total: paid.deposit + paid.balance };
}

const refundAll = (paid: Paid): readonly StayEffect[] => {
  const split = refundAllOf(paid);
  return split.total > 0 ? [{ type: 'refund', split }] : [];
};

/**
 * Fail: the provider refused the booking's intent or the intent was cancelled: `pending` → `failed`, the
 * nights released, any intent cancelled, and any money already paid (a deposit) refunded in full.
 * Invariant: a failure never touches a stay past `pending`; money received − refunded ends at 0.
 */
export function failStay(s: Stay | null, cmd: EndPendingCommand, now: number): StayOutcome {
  return step(s, 'payment_failed', {}, cmd.cid, now, (next) => [
    { type: 'release_nights' },
    { type: 'cancel_intents' },
    ...refundAll(cmd.paid),
    { type: 'notify', notice: 'stay_failed', dedupeKey: `stay_failed:${next.id}` },
  ]);
}

/**
 * Expire: not paid within the hold: `pending` → `expired`, the nights released, any intent cancelled, and
 * any money already paid (a deposit) refunded in full. A payment still `processing` (a bank debit in flight)
 * keeps the stay pending until it settles (`STAY_PAYMENT_PROCESSING`): cancelling it is not possible, and
 * the money it brings decides. Invariant: never before `holdUntil`; money received − refunded ends at 0.
 */
export function expireStay(s: Stay | null, cmd: EndPendingCommand & { readonly processing: boolean }, now: number): StayOutcome {
  if (s && s.status === 'pending' && now < s.holdUntil) return noop('STAY_HOLD_NOT_OVER', s);
  if (s && s.status === 'pending' && cmd.processing) return noop('STAY_PAYMENT_PROCESSING', s);
  return step(s, 'hold_expired', {}, cmd.cid, now, (next) => [
    { type: 'release_nights' },
    { type: 'cancel_intents' },
    ...refundAll(cmd.paid),
    { type: 'notify', notice: 'stay_expired', dedupeKey: `stay_expired:${next.id}` },
  ]);
}

// ---------------------------------------------------------------- cancel

export interface CancelStayCommand {
  readonly reason: CancelReason;
  readonly settings: SiteStaySettings;
  /** Net money settled for the stay, from the payments ledger. */
  readonly paid: Paid;
  readonly cid: CorrelationId;
}

/**
 * Cancel: `pending`/`confirmed`/`checked_in` → `cancelled`; the key is
 * revoked in the same transaction (access never waits on billing), the
 * nights released, a pending stay's intents cancelled, and the refund the
 * site's policy allows of what was paid is queued (money that lands after a
 * pending stay was cancelled is refunded in full: `PAYMENT_AFTER_STAY_ENDED`).
 * Invariant: the refund never exceeds what was paid (see `refundFor`).
 */
export function cancelStay(s: Stay | null, cmd: CancelStayCommand, now: number): StayOutcome {
  if (!s) return refused('STAY_NOT_FOUND');
  const checkInAt = stayWindow(s, cmd.settings).validFrom;
  // a no-show keeps what the policy's no-show rule says (often everything): only a guest who did not come by
  // the check-in time, and has not checked in, is one; before that the guest may still come
  if (cmd.reason === 'no_show' && (now < checkInAt || s.status === 'checked_in'))
    return refused('NO_SHOW_BEFORE_CHECK_IN', 'a guest is a no-show only once the check-in time passed without a check-in');
  const days = daysUntilCheckIn(checkInAt, now);
  const split = refundFor(cmd.settings.cancellationPolicy, s.amount, cmd.paid, days, cmd.reason);
  return step(s, 'cancel', { cancelReason: cmd.reason }, cmd.cid, now, (next) => [
    ...(next.keyId === null ? [] : [{ type: 'revoke_key' as const, keyId: next.keyId, reason: 'stay_cancelled' as const }]),
    { type: 'release_nights' },
    ...(s.status === 'pending' ? [{ type: 'cancel_intents' as const }] : []),
    ...(split.total > 0 ? [{ type: 'refund' as const, split }] : []),
    { type: 'notify', notice: 'stay_cancelled', dedupeKey: `stay_cancelled:${next.id}` },
  ]);
}

// ---------------------------------------------------------------- check in / out

/** Check in: `confirmed` → `checked_in`. Invariant: not before the check-in day starts at the site. */
export function checkInStay(
  s: Stay | null,
  cmd: { readonly settings: SiteStaySettings; readonly cid: CorrelationId },
  now: number,
): StayOutcome {
  if (s && s.status === 'confirmed' && now < zonedInstant(s.checkIn, '00:00', cmd.settings.timeZone)) {
    return refused('STAY_NOT_STARTED', 'check-in opens on the check-in date');
  }
  return step(s, 'check_in', {}, cmd.cid, now, () => []);
}

/**
 * Check out: `checked_in` → `checked_out`; the key ends now (revoked with
 * reason `stay_checked_out`, so an early check-out does not leave it open
 * until its validUntil) and the remaining nights are released.
 */
export function checkOutStay(s: Stay | null, cmd: { readonly cid: CorrelationId }, now: number): StayOutcome {
  return step(s, 'check_out', {}, cmd.cid, now, (next) => [
    ...(next.keyId === null ? [] : [{ type: 'revoke_key' as const, keyId: next.keyId, reason: 'stay_checked_out' as const }]),
    { type: 'release_nights' },
    { type: 'notify', notice: 'stay_checked_out', dedupeKey: `stay_checked_out:${next.id}` },
  ]);
}
