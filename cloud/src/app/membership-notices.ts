import type { CorrelationId } from '@tobira/shared';
import type { Queryable } from '../adapters/db/db.js';
import { loadStaySettings } from '../adapters/db/stays.js';
import type { MembershipNotice, Membership } from '../domain/memberships.js';
import { localDateOf } from '../domain/nights.js';
import type { Plan } from '../domain/plans.js';
import type { AppDeps } from './deps.js';
import { enqueueNotification } from './notifications.js';

/**
 * A membership verb's notice as a message to the member, queued
 * by THE notification verb in the membership's transaction: `membership_ending`
 * (the period end as a date of the site) and `payment_failed` (the plan's
 * price). The notice's dedupe key is the message's (`<template>:<subject>`),
 * so a retried verb queues nothing twice. A rejection for `checkout_expired`
 * is sent as `checkout_expired` (the applicant's checkout ended unpaid at its
 * deadline). The other notices have no
 * template yet (docs/notifications.md): nothing is sent for them.
 */
export async function notifyMembership(
  deps: AppDeps,
  tx: Queryable,
  m: Membership,
  plan: Plan,
  notice: MembershipNotice,
  dedupeKey: string,
  cid: CorrelationId,
): Promise<'queued' | 'no_template'> {
  const base = {
    // the subject is the dedupe key after its template: membership_ending:<id>, payment_failed:<id>:<period end>
    subjectId: dedupeKey.startsWith(`${notice}:`) ? dedupeKey.slice(notice.length + 1) : dedupeKey,
    personId: m.personId,
    siteId: m.siteId,
    cid,
    now: deps.clock.now(),
    channel: deps.notificationChannel,
    log: deps.log,
  };
  switch (notice) {
    case 'membership_ending': {
      const settings = await loadStaySettings(tx, m.siteId);
      const endsAt = m.currentPeriodEnd ?? deps.clock.now();
      await enqueueNotification(tx, {
        ...base,
        template: 'membership_ending',
        vars: { plan: plan.name, endsOn: localDateOf(endsAt, settings?.timeZone ?? 'Asia/Tokyo') },
      });
      return 'queued';
    }
    case 'payment_failed':
      await enqueueNotification(tx, {
        ...base,
        template: 'payment_failed',
        vars: { plan: plan.name, amount: plan.amount, currency: plan.currency },
      });
      return 'queued';
    case 'membership_rejected':
      // an approved checkout that ended unpaid at its deadline: the applicant is told (other rejections: no template yet)
      if (m.endReason !== 'checkout_expired') return 'no_template';
      await enqueueNotification(tx, { ...base, template: 'checkout_expired', vars: { plan: plan.name } });
      return 'queued';
    case 'membership_activated':
    case 'membership_ended':
    case 'access_suspended':
    case 'access_restored':
      return 'no_template';
    default: {
      const never: never = notice;
      throw new Error(`unhandled membership notice ${String(never)}`);
    }
  }
}
