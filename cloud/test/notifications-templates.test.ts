import { describe, expect, it } from 'vitest';
import {
  CATALOGUES,
  ENTRY_TEXT,
  NOTIFICATION_LOCALES,
  NOTIFICATION_TEMPLATES,
  TemplateVariableMissing,
  fillSecret,
  formatAmount,
  placeholdersOf,
  renderNotification,
  resolveLocale,
  SECRET_PLACEHOLDER,
  type Catalogue,
  type NotificationVars,
} from '../src/domain/notifications.js';

/**
 * The template catalogues (docs/notifications.md): every template exists in
 * Japanese and English, names the same variables in both, and renders with
 * every variable filled (no `{{…}}` left, no `undefined`); a message about a
 * key never carries a credential.
 */
const SAMPLE: NotificationVars = {
  key_issued: { name: 'Hana', site: 'Kyoto Inn', checkIn: '2027-01-10', checkOut: '2027-01-12', credential: 'pin' },
  key_revoked: { name: 'Hana', site: 'Kyoto Inn', checkIn: '2027-01-10', checkOut: '2027-01-12' },
  payment_received: { name: 'Hana', site: 'Kyoto Inn', amount: 24_000, currency: 'jpy' },
  refund_made: { name: 'Hana', site: 'Kyoto Inn', amount: 1_050, currency: 'usd' },
  membership_ending: { name: 'Hana', site: 'Kyoto Inn', plan: 'Lounge monthly', endsOn: '2027-02-28' },
  payment_failed: { name: 'Hana', site: 'Kyoto Inn', plan: 'Lounge monthly', amount: 8_800, currency: 'jpy' },
  checkout_expired: { name: 'Hana', site: 'Kyoto Inn', plan: 'Lounge monthly' },
};

describe('notification templates', () => {
  it('every template exists in both catalogues, and nothing else does', () => {
    for (const locale of NOTIFICATION_LOCALES) expect(Object.keys(CATALOGUES[locale]).sort()).toEqual([...NOTIFICATION_TEMPLATES].sort());
  });

  it.each(NOTIFICATION_TEMPLATES)('%s names the same variables in ja and en', (template) => {
    const vars = (locale: 'ja' | 'en') => {
      const t = CATALOGUES[locale][template];
      return [...new Set([...placeholdersOf(t.subject), ...placeholdersOf(t.body)])].sort();
    };
    expect(vars('ja')).toEqual(vars('en'));
    expect(vars('ja').length).toBeGreaterThan(0);
  });

  it.each(NOTIFICATION_LOCALES.flatMap((l) => NOTIFICATION_TEMPLATES.map((t) => [l, t] as const)))(
    '%s/%s renders every variable',
    (locale, template) => {
      const r = renderNotification(template, locale, SAMPLE[template]);
      for (const text of [r.subject, r.body]) {
        expect(text).not.toMatch(/\{\{|\}\}/);
        expect(text).not.toMatch(/undefined|null|NaN|\[object/);
        expect(text.trim().length).toBeGreaterThan(0);
      }
      expect(r.body).toContain('Hana');
      expect(r.subject).toContain('Kyoto Inn');
    },
  );

  it('the key message says how to enter, in the locale, per credential kind, and never prints a credential', () => {
    for (const locale of NOTIFICATION_LOCALES) {
      for (const credential of ['pin', 'card', 'desk'] as const) {
        const r = renderNotification('key_issued', locale, { ...SAMPLE.key_issued, credential });
        expect(r.body).toContain(ENTRY_TEXT[locale][credential]);
        // dates are the only digits: no PIN-like run of 4+ digits outside them
        expect(r.body.replace(/\d{4}-\d{2}-\d{2}/g, '')).not.toMatch(/\d{4,}/);
      }
    }
    expect(renderNotification('key_issued', 'en', SAMPLE.key_issued).body).toContain('the PIN you chose at booking');
  });

  it('a drawn PIN is never rendered into the stored text: the body keeps {{pin}}, filled in only at send time', () => {
    for (const locale of NOTIFICATION_LOCALES) {
      const r = renderNotification('key_issued', locale, { ...SAMPLE.key_issued, credential: 'issued_pin' });
      expect(r.body.split(SECRET_PLACEHOLDER)).toHaveLength(2);
      expect(r.body.replace(/\d{4}-\d{2}-\d{2}/g, '')).not.toMatch(/\d{4,}/);
      const sent = fillSecret(r.body, '04812345');
      expect(sent).toContain('04812345');
      expect(sent).not.toContain('{{');
    }
    expect(fillSecret('no secret here', null)).toBe('no secret here');
  });

  it('a catalogue naming a variable the template does not get fails loudly instead of sending `{{x}}`', () => {
    const broken: Record<'ja' | 'en', Catalogue> = {
      ja: { ...CATALOGUES.ja, refund_made: { subject: '{{site}}', body: '{{refundCode}}' } },
      en: CATALOGUES.en,
    };
    expect(() => renderNotification('refund_made', 'ja', SAMPLE.refund_made, broken)).toThrow(TemplateVariableMissing);
  });

  it('formats minor units per currency and locale', () => {
    expect(formatAmount(24_000, 'jpy', 'en')).toBe('¥24,000');
    expect(formatAmount(24_000, 'jpy', 'ja')).toBe('￥24,000');
    expect(formatAmount(1_050, 'usd', 'en')).toBe('$10.50');
  });

  it('resolves the locale person → site → ja', () => {
    expect(resolveLocale('en', 'ja')).toBe('en');
    expect(resolveLocale(null, 'en')).toBe('en');
    expect(resolveLocale(null, null)).toBe('ja');
    expect(resolveLocale('ja', 'en')).toBe('ja');
  });
});
