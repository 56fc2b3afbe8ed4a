/**
 * Notifications to guests and members (docs/notifications.md):
 * the template catalogues in Japanese and English, the locale rule
 * (person → site → `ja`) and the pure rendering. No I/O: the verb
 * (`app/notifications.ts`) loads the recipient, renders here and writes the
 * outbox row in the caller's transaction.
 *
 * A template never receives a credential: a credential the guest chose
 * exists only as a digest, so the key message says how to enter
 * (`credential`: the PIN the guest chose at booking, the card, or the front
 * desk). The one exception is a PIN the cloud drew for a stay booked without
 * a credential (`issued_pin`): its entry text keeps the `{{pin}}`
 * placeholder (SECRET_PLACEHOLDER) unfilled, the PIN waits apart from the
 * rendered text until the row is delivered, and the dispatcher fills it in
 * at send time (`fillSecret`).
 */

export const NOTIFICATION_LOCALES = ['ja', 'en'] as const;
export type NotificationLocale = (typeof NOTIFICATION_LOCALES)[number];
export const DEFAULT_NOTIFICATION_LOCALE: NotificationLocale = 'ja';

export const NOTIFICATION_CHANNELS = ['log', 'webhook', 'smtp'] as const;
export type NotificationChannel = (typeof NOTIFICATION_CHANNELS)[number];

export const NOTIFICATION_STATUSES = ['pending', 'sending', 'sent', 'dead'] as const;
export type NotificationStatus = (typeof NOTIFICATION_STATUSES)[number];

/**
 * How the guest enters: with the PIN they chose at booking, their card, the PIN the cloud drew for them (carried
 * by this message, filled in at send time), or (no credential and no PIN to send) at the front desk.
 */
export type EntryCredential = 'pin' | 'card' | 'issued_pin' | 'desk';

/** The placeholder a rendered body keeps for a secret the dispatcher fills in at send time (never stored in the text). */
export const SECRET_PLACEHOLDER = '{{pin}}';

interface StayVars {
  readonly name: string;
  readonly site: string;
  readonly checkIn: string;
  readonly checkOut: string;
}
interface MoneyVars {
  readonly name: string;
  readonly site: string;
  /** minor units, with its ISO currency (formatted per locale) */
  readonly amount: number;
  readonly currency: string;
}
interface MembershipVars {
  readonly name: string;
  readonly site: string;
  readonly plan: string;
}

/** Every template and the variables it is rendered with (the compiler checks every call site). */
export interface NotificationVars {
  readonly key_issued: StayVars & { readonly credential: EntryCredential };
  readonly key_revoked: StayVars;
  readonly payment_received: MoneyVars;
  readonly refund_made: MoneyVars;
  readonly membership_ending: MembershipVars & { readonly endsOn: string };
  readonly payment_failed: MembershipVars & { readonly amount: number; readonly currency: string };
  /** an approved application whose first payment did not arrive by the checkout deadline */
  readonly checkout_expired: MembershipVars;
}
export type NotificationTemplate = keyof NotificationVars;
export const NOTIFICATION_TEMPLATES = [
  'key_issued',
  'key_revoked',
  'payment_received',
  'refund_made',
  'membership_ending',
  'payment_failed',
  'checkout_expired',
] as const satisfies readonly NotificationTemplate[];

export interface TemplateText {
  readonly subject: string;
  readonly body: string;
}
export type Catalogue = Readonly<Record<NotificationTemplate, TemplateText>>;

/** `{{name}}` placeholders; `{{howToEnter}}` is filled from ENTRY_TEXT, `{{amount}}` with the locale's currency format. */
export const CATALOGUES: Readonly<Record<NotificationLocale, Catalogue>> = {
  ja: {
    key_issued: {
      subject: '【{{site}}】ご予約が確定しました',
      body: '{{name}} 様\n\n{{site}} のご予約が確定しました。\nチェックイン: {{checkIn}}\nチェックアウト: {{checkOut}}\n\n入室方法: {{howToEnter}}\n\nご利用をお待ちしております。',
    },
    key_revoked: {
      subject: '【{{site}}】ご予約がキャンセルされました',
      body: '{{name}} 様\n\n{{site}} のご予約（{{checkIn}} 〜 {{checkOut}}）はキャンセルされました。\nこのご予約の入室権限は無効になりました。',
    },
    payment_received: {
      subject: '【{{site}}】お支払いを受け付けました',
      body: '{{name}} 様\n\n{{site}} へのお支払い {{amount}} を受け付けました。ありがとうございます。',
    },
    refund_made: {
      subject: '【{{site}}】返金が完了しました',
      body: '{{name}} 様\n\n{{site}} から {{amount}} を返金しました。お手元に反映されるまで数日かかる場合があります。',
    },
    membership_ending: {
      subject: '【{{site}}】メンバーシップ終了のお知らせ',
      body: '{{name}} 様\n\n{{site}} のメンバーシップ「{{plan}}」は {{endsOn}} に終了します。\n終了後は入室できなくなります。',
    },
    payment_failed: {
      subject: '【{{site}}】お支払いができませんでした',
      body: '{{name}} 様\n\n{{site}} のメンバーシップ「{{plan}}」のお支払い {{amount}} ができませんでした。\nお支払い方法をご確認ください。',
    },
    checkout_expired: {
      subject: '【{{site}}】メンバーシップのお申し込みの期限が過ぎました',
      body: '{{name}} 様\n\n{{site}} のメンバーシップ「{{plan}}」のお申し込みは、お支払いの期限までに初回のお支払いが確認できなかったため終了しました。\n今後の請求はありません。期限の後に届いたお支払いは全額返金します。\n改めてお申し込みいただけます。',
    },
  },
  en: {
    key_issued: {
      subject: '[{{site}}] Your stay is confirmed',
      body: 'Dear {{name}},\n\nYour stay at {{site}} is confirmed.\nCheck-in: {{checkIn}}\nCheck-out: {{checkOut}}\n\nHow to enter: {{howToEnter}}\n\nWe look forward to your visit.',
    },
    key_revoked: {
      subject: '[{{site}}] Your stay was cancelled',
      body: 'Dear {{name}},\n\nYour stay at {{site}} ({{checkIn}} to {{checkOut}}) was cancelled.\nIts door access no longer works.',
    },
    payment_received: {
      subject: '[{{site}}] Payment received',
      body: 'Dear {{name}},\n\nWe received your payment of {{amount}} to {{site}}. Thank you.',
    },
    refund_made: {
      subject: '[{{site}}] Refund made',
      body: 'Dear {{name}},\n\n{{site}} refunded {{amount}} to you. It may take a few days to appear on your statement.',
    },
    membership_ending: {
      subject: '[{{site}}] Your membership is ending',
      body: 'Dear {{name}},\n\nYour membership "{{plan}}" at {{site}} ends on {{endsOn}}.\nAfter that day your door access stops.',
    },
    payment_failed: {
      subject: '[{{site}}] Your payment failed',
      body: 'Dear {{name}},\n\nThe payment of {{amount}} for your membership "{{plan}}" at {{site}} failed.\nPlease check your payment method.',
    },
    checkout_expired: {
      subject: '[{{site}}] Your membership application has lapsed',
      body: 'Dear {{name}},\n\nYour application for the membership "{{plan}}" at {{site}} has ended: its first payment did not arrive by the checkout deadline.\nNothing more will be charged, and a payment that arrived after the deadline is refunded in full.\nYou are welcome to apply again.',
    },
  },
};

/** How to enter, per locale: never a credential, only where it comes from. */
export const ENTRY_TEXT: Readonly<Record<NotificationLocale, Readonly<Record<EntryCredential, string>>>> = {
  ja: {
    pin: 'ご予約時にお選びいただいた暗証番号（PIN）をドアのキーパッドに入力してください。',
    card: 'ご予約時に登録したカードをドアのリーダーにかざしてください。',
    issued_pin: 'ドアのキーパッドに次の暗証番号（PIN）を入力してください: {{pin}}\nこの番号は他の方に知らせないでください。',
    desk: 'フロントで入室方法をお受け取りください。',
  },
  en: {
    pin: 'Enter the PIN you chose at booking on the door keypad.',
    card: 'Hold the card you registered at booking to the door reader.',
    issued_pin: 'Enter this PIN on the door keypad: {{pin}}\nKeep it to yourself.',
    desk: 'Please collect your entry details at the front desk.',
  },
};

/** Person → site → `ja`. */
export function resolveLocale(person: NotificationLocale | null, site: NotificationLocale | null): NotificationLocale {
  return person ?? site ?? DEFAULT_NOTIFICATION_LOCALE;
}

/** An amount in minor units, in the locale's currency format (JPY has no minor unit; USD two). */
export function formatAmount(amount: number, currency: string, locale: NotificationLocale): string {
  const f = new Intl.NumberFormat(locale === 'ja' ? 'ja-JP' : 'en-US', { style: 'currency', currency: currency.toUpperCase() });
  const digits = f.resolvedOptions().maximumFractionDigits ?? 0;
  return f.format(amount / 10 ** digits);
}

/** The placeholders a text names (`{{x}}` → `x`). */
export function placeholdersOf(text: string): string[] {
  return [...text.matchAll(/\{\{(\w+)\}\}/g)].map((m) => m[1] ?? '');
}

/** The string values a template's text is filled with (amounts formatted, the entry text chosen). */
export function valuesOf<T extends NotificationTemplate>(
  template: T,
  locale: NotificationLocale,
  vars: NotificationVars[T],
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(vars)) {
    if (typeof v === 'string') out[k] = v;
  }
  if ('amount' in vars && 'currency' in vars) out['amount'] = formatAmount(vars.amount, vars.currency, locale);
  if (template === 'key_issued' && 'credential' in vars) out['howToEnter'] = ENTRY_TEXT[locale][vars.credential];
  return out;
}

export class TemplateVariableMissing extends Error {
  override readonly name = 'TemplateVariableMissing';
}

function fill(text: string, values: Readonly<Record<string, string>>, where: string): string {
  return text.replace(/\{\{(\w+)\}\}/g, (_, k: string) => {
    const v = values[k];
    if (v === undefined) throw new TemplateVariableMissing(`${where}: no value for {{${k}}}`);
    return v;
  });
}

/** Renders a template in a locale. Throws TemplateVariableMissing (a bug: the types name every variable). */
export function renderNotification<T extends NotificationTemplate>(
  template: T,
  locale: NotificationLocale,
  vars: NotificationVars[T],
  catalogues: Readonly<Record<NotificationLocale, Catalogue>> = CATALOGUES,
): TemplateText {
  const text = catalogues[locale][template];
  const values = valuesOf(template, locale, vars);
  const where = `${locale}/${template}`;
  return { subject: fill(text.subject, values, where), body: fill(text.body, values, where) };
}

/** A rendered body with its secret filled in, at send time only (the stored row keeps the placeholder). */
export function fillSecret(body: string, secret: string | null): string {
  return secret === null ? body : body.split(SECRET_PLACEHOLDER).join(secret);
}

/** The dedupe key of a business event: one message per template and subject, however often its verb runs. */
export function notificationDedupeKey(template: NotificationTemplate, subjectId: string): string {
  return `${template}:${subjectId}`;
}
