import { asDoorId, asSiteId } from '@tobira/shared';
import { describe, expect, it } from 'vitest';
import { createPlan, retirePlan, type Plan, type PlanInput } from '../src/domain/plans.js';

const NOW = Date.UTC(2026, 11, 2, 9);
const LATER = NOW + 86_400_000;

const input = (over: Partial<PlanInput> = {}): PlanInput => ({
  id: 'plan-1',
  siteId: asSiteId('site-1'),
  name: 'Monthly',
  amount: 8000,
  currency: 'jpy',
  interval: 'month',
  intervalCount: 1,
  doors: [asDoorId('d-1'), asDoorId('d-2')],
  membersOnly: false,
  monthlyEntryQuota: null,
  walkInAmount: null,
  graceSeconds: 3 * 86_400,
  ...over,
});

function created(over: Partial<PlanInput> = {}): Plan {
  const o = createPlan(null, input(over), NOW);
  if (o.status !== 'applied') throw new Error(`create failed: ${o.code}`);
  return o.state;
}

const refusal = (over: Partial<PlanInput>) => {
  const o = createPlan(null, input(over), NOW);
  return o.status === 'refused' ? { code: o.code, detail: o.detail ?? '' } : { code: o.status, detail: '' };
};

describe('createPlan', () => {
  it('a valid plan is created active, with no Stripe price yet, created and updated now', () => {
    const o = createPlan(null, input(), NOW);
    expect(o).toMatchObject({ status: 'applied', code: 'PLAN_CREATED' });
    if (o.status !== 'applied') return;
    expect(o.state).toEqual({ ...input(), status: 'active', stripePriceId: null, createdAt: NOW, updatedAt: NOW, retiredAt: null });
  });

  it('the smallest valid values are accepted: price 1, one period, no entries, no grace, walk-in price 1', () => {
    expect(
      createPlan(null, input({ amount: 1, intervalCount: 1, monthlyEntryQuota: 0, graceSeconds: 0, walkInAmount: 1 }), NOW).status,
    ).toBe('applied');
    expect(createPlan(null, input({ intervalCount: 12, doors: [asDoorId('d-1')] }), NOW).status).toBe('applied');
  });

  const invalid: [string, Partial<PlanInput>, RegExp][] = [
    ['a zero price', { amount: 0 }, /amount/],
    ['a negative price', { amount: -100 }, /amount/],
    ['a fractional price', { amount: 10.5 }, /amount/],
    ['an upper-case currency', { currency: 'JPY' }, /currency/],
    ['a two-letter currency', { currency: 'jp' }, /currency/],
    ['a four-letter currency', { currency: 'jpyy' }, /currency/],
    ['a currency with more around it', { currency: 'xjpy' }, /currency/],
    ['a currency followed by more', { currency: 'jpy1' }, /currency/],
    ['zero periods', { intervalCount: 0 }, /intervalCount/],
    ['thirteen periods', { intervalCount: 13 }, /intervalCount/],
    ['a fractional period count', { intervalCount: 1.5 }, /intervalCount/],
    ['no doors', { doors: [] }, /door/],
    ['a negative entry quota', { monthlyEntryQuota: -1 }, /monthlyEntryQuota/],
    ['a fractional entry quota', { monthlyEntryQuota: 2.5 }, /monthlyEntryQuota/],
    ['a negative grace', { graceSeconds: -1 }, /graceSeconds/],
    ['a fractional grace', { graceSeconds: 0.5 }, /graceSeconds/],
    ['a zero walk-in price', { walkInAmount: 0 }, /walkInAmount/],
    ['a negative walk-in price', { walkInAmount: -1 }, /walkInAmount/],
    ['a fractional walk-in price', { walkInAmount: 1.5 }, /walkInAmount/],
    ['a walk-in price beyond exact integers', { walkInAmount: 2 ** 53 }, /walkInAmount/],
  ];
  it.each(invalid)('refuses %s: PLAN_INVALID naming the field', (_, over, field) => {
    const r = refusal(over);
    expect(r.code).toBe('PLAN_INVALID');
    expect(r.detail).toMatch(field);
  });

  it('a plan with no entry limit and no walk-in sale is valid', () => {
    expect(refusal({ monthlyEntryQuota: null, walkInAmount: null }).code).toBe('applied');
    expect(refusal({ monthlyEntryQuota: 30, walkInAmount: 1500 }).code).toBe('applied');
  });

  it('the same plan sent again (doors in any order) is a noop that keeps the stored plan', () => {
    const existing = { ...created(), stripePriceId: 'price_1', createdAt: NOW - 1000, updatedAt: NOW - 1000 };
    const again = createPlan(existing, input({ doors: [asDoorId('d-2'), asDoorId('d-1')] }), LATER);
    expect(again).toEqual({ status: 'noop', code: 'PLAN_ALREADY_EXISTS', state: existing });
  });
  it('door order counts on neither side: a plan stored with its doors unsorted matches a sorted resend', () => {
    const existing = created({ doors: [asDoorId('d-2'), asDoorId('d-1')] });
    expect(createPlan(existing, input({ doors: [asDoorId('d-1'), asDoorId('d-2')] }), LATER)).toMatchObject({
      status: 'noop',
      code: 'PLAN_ALREADY_EXISTS',
    });
  });

  const other: [string, Partial<PlanInput>][] = [
    ['another site', { siteId: asSiteId('site-2') }],
    ['another name', { name: 'Yearly' }],
    ['another price', { amount: 9000 }],
    ['another currency', { currency: 'usd' }],
    ['another interval', { interval: 'year' }],
    ['another period count', { intervalCount: 2 }],
    ['fewer doors', { doors: [asDoorId('d-1')] }],
    ['other doors', { doors: [asDoorId('d-1'), asDoorId('d-3')] }],
  ];
  it.each(other)('the id of an existing plan with %s is refused PLAN_ALREADY_EXISTS', (_, over) => {
    const o = createPlan(created(), input(over), LATER);
    expect(o).toMatchObject({ status: 'refused', code: 'PLAN_ALREADY_EXISTS' });
    expect(o.status === 'refused' && o.detail).toMatch(/another plan/);
  });

  it('an invalid resend is refused as invalid, not answered as the existing plan', () => {
    expect(createPlan(created(), input({ amount: 0 }), LATER)).toMatchObject({ status: 'refused', code: 'PLAN_INVALID' });
  });
});

describe('retirePlan', () => {
  it('an active plan is retired now', () => {
    const p = created();
    const o = retirePlan(p, LATER);
    expect(o).toMatchObject({ status: 'applied', code: 'PLAN_RETIRED' });
    if (o.status !== 'applied') return;
    expect(o.state).toEqual({ ...p, status: 'retired', retiredAt: LATER, updatedAt: LATER });
  });
  it('a retired plan: a noop that keeps its first retirement time', () => {
    const r = retirePlan(created(), NOW);
    if (r.status !== 'applied') throw new Error('retire failed');
    expect(retirePlan(r.state, LATER)).toEqual({ status: 'noop', code: 'PLAN_ALREADY_RETIRED', state: r.state });
  });
  it('no plan: PLAN_NOT_FOUND', () => {
    expect(retirePlan(null, NOW)).toMatchObject({ status: 'refused', code: 'PLAN_NOT_FOUND' });
  });
});
