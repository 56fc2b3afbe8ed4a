import type { FastifyRequest } from 'fastify';
import { z } from 'zod';
import { listPaymentsOfStay, listRefundsOfPayment } from '../../adapters/db/payments.js';
import { loadStay } from '../../adapters/db/stays.js';
import { loadBlock } from '../../adapters/db/walk-ins.js';
import { moneyOfEndedStay, type MoneyStatement } from '../../domain/payments.js';
import type { Api, Ctx } from '../context.js';
import { Id } from '../schemas.js';

type Lang = 'ja' | 'en';
type Shown = 'pending' | 'paid' | 'paid_on_hold' | 'balance_due' | 'ended' | 'cancelled' | 'not_found';
/** What happened to the money of a booking that ended: the ledger's words, never "nothing was charged" unless it knows so. */
type Money = MoneyStatement;

interface Words extends Record<Shown, string> {
  readonly title: string;
  readonly balance: string;
  readonly money: Record<Money, (m: { paid: string; refunded: string; refunding: string; kept: string; back: string }) => string>;
}

const TEXT: Record<Lang, Words> = {
  en: {
    title: 'Your booking',
    pending: 'We are waiting for your payment to be confirmed. This page refreshes by itself.',
    paid: 'Paid. Your booking is confirmed; your key will reach you shortly.',
    paid_on_hold: 'Paid. Your booking is confirmed, but entry is on hold: please contact the front desk.',
    balance_due: 'Part of the price is paid.',
    ended: 'This booking was not completed.',
    cancelled: 'This booking was cancelled.',
    not_found: 'We could not find this booking.',
    balance: 'Balance due',
    money: {
      none: () => 'Nothing was charged.',
      checking: () => 'We are still confirming with the payment provider whether anything was charged. This page will show the outcome.',
      refunding: (m) => `You paid ${m.paid}; ${m.refunding} is being refunded to you.`,
      refunded: (m) => `You paid ${m.paid}; ${m.refunded} was refunded to you.`,
      kept: (m) => `You paid ${m.paid}; ${m.kept} is kept under the cancellation policy and ${m.back} comes back to you.`,
    },
  },
  ja: {
    title: 'ご予約',
    pending: 'お支払いの確認をお待ちしています。このページは自動で更新されます。',
    paid: 'お支払い済みです。ご予約が確定しました。鍵はまもなくお届けします。',
    paid_on_hold: 'お支払い済みです。ご予約は確定していますが、入館は保留中です。フロントにお問い合わせください。',
    balance_due: '料金の一部をお支払いいただきました。',
    ended: 'このご予約は完了しませんでした。',
    cancelled: 'このご予約はキャンセルされました。',
    not_found: 'ご予約が見つかりませんでした。',
    balance: '残額',
    money: {
      none: () => '料金は請求されていません。',
      checking: () => '請求の有無を決済代行会社に確認しています。結果はこのページに表示されます。',
      refunding: (m) => `お支払い ${m.paid} のうち ${m.refunding} を返金手続き中です。`,
      refunded: (m) => `お支払い ${m.paid} のうち ${m.refunded} を返金しました。`,
      kept: (m) => `お支払い ${m.paid} のうち ${m.kept} はキャンセル規定により返金されず、${m.back} を返金します。`,
    },
  },
};

/** `?lang=` first, then the first of ja/en in Accept-Language, else English. */
function langOf(req: FastifyRequest, asked: Lang | undefined): Lang {
  if (asked) return asked;
  const h = req.headers['accept-language'];
  const tags = (typeof h === 'string' ? h : '').split(',').map((t) => t.trim().slice(0, 2).toLowerCase());
  return tags.find((t): t is Lang => t === 'ja' || t === 'en') ?? 'en';
}

const escape = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** Minor units → a localized amount (yen has no minor unit, dollars have cents). */
function money(minor: number, currency: string, lang: Lang): string {
  const f = new Intl.NumberFormat(lang === 'ja' ? 'ja-JP' : 'en-US', { style: 'currency', currency: currency.toUpperCase() });
  return f.format(minor / 10 ** (f.resolvedOptions().maximumFractionDigits ?? 0));
}

/**
 * The page refreshes itself while the outcome is not known: every 5 s while a payment is awaited, every 30 s
 * while the money of an ended booking is being checked with Stripe (a sweep of minutes, not seconds).
 */
function page(lang: Lang, shown: Shown, extra: string, checking = false): string {
  const t = TEXT[lang];
  const every = shown === 'pending' ? 5 : checking ? 30 : 0;
  const refresh = every > 0 ? `<meta http-equiv="refresh" content="${every}">` : '';
  return `<!doctype html><html lang="${lang}"><head><meta charset="utf-8">${refresh}<title>${escape(t.title)}</title></head>
<body><h1>${escape(t.title)}</h1><p data-status="${shown}">${escape(t[shown])}</p>${extra}</body></html>`;
}

/**
 * The guest's return page after paying (`return_url`): server-rendered, in
 * Japanese or English, from the server's ledger only — pending, paid, or
 * the balance due; for a booking that ended, what happened to the money
 * (nothing charged, refunded, being refunded, or kept under the policy).
 * Nothing a client sends here can claim a payment (`redirect_status` is
 * Stripe.js's word from the browser); the ledger moves only on verified
 * webhooks re-read from Stripe.
 */
export function payReturnRoutes(app: Api, ctx: Ctx): void {
  app.get(
    '/pay/return',
    {
      config: { public: true },
      schema: {
        // a guest's HTML page, not part of the admin API (the OpenAPI document describes JSON answers only)
        hide: true,
        tags: ['stays'],
        summary: "The guest's payment return page (HTML, ja/en): the ledger's view of the stay, never a client's claim",
        querystring: z.strictObject({
          stay: Id,
          lang: z.enum(['ja', 'en']).optional(),
          // what Stripe.js appends on redirect; read by nobody
          payment_intent: z.string().max(200).optional(),
          payment_intent_client_secret: z.string().max(300).optional(),
          redirect_status: z.string().max(50).optional(),
        }),
      },
    },
    async (req, reply) => {
      const lang = langOf(req, req.query.lang);
      void reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').header('content-language', lang);
      const stay = await loadStay(ctx.db, req.query.stay);
      if (!stay) return reply.status(404).send(page(lang, 'not_found', ''));
      const payments = await listPaymentsOfStay(ctx.db, stay.id);
      const received = payments.reduce((n, p) => n + p.amountReceived, 0);
      let shown: Shown;
      let extra = '';
      let checking = false;
      if (stay.status === 'cancelled' || stay.status === 'failed' || stay.status === 'expired') {
        shown = stay.status === 'cancelled' ? 'cancelled' : 'ended';
        const m = moneyOfEndedStay(
          await Promise.all(
            payments.map(async (p) => ({
              ...p,
              refunds: (await listRefundsOfPayment(ctx.db, p.id)).map((r) => ({
                amount: r.amount,
                status: r.status,
                source: r.source,
                attempt: r.source === 'tobira' ? Number(r.idempotencyKey.split(':').pop() ?? '0') : null,
              })),
            })),
          ),
        );
        const said = m.said;
        checking = said === 'checking';
        const { refunded, refunding, kept } = m;
        const fmt = (n: number) => money(n, stay.currency, lang);
        const sentence = TEXT[lang].money[said]({
          paid: fmt(received),
          refunded: fmt(refunded),
          refunding: fmt(refunding),
          kept: fmt(kept),
          back: fmt(refunded + refunding),
        });
        extra = `<p data-money="${said}" data-paid="${received}" data-refunded="${refunded}" data-refunding="${refunding}">${escape(sentence)}</p>`;
      } else if (received >= stay.amount)
        // a person blocked at the site gets no key (the block revoked it, and none is issued while it lasts):
        // the page must not promise one, nor say why
        shown = (await loadBlock(ctx.db, stay.siteId, stay.personId)) === null ? 'paid' : 'paid_on_hold';
      else if (received > 0) {
        shown = 'balance_due';
        extra = `<p data-balance="${stay.amount - received}">${escape(TEXT[lang].balance)}: ${escape(money(stay.amount - received, stay.currency, lang))}</p>`;
      } else shown = 'pending';
      return reply.status(200).send(page(lang, shown, extra, checking));
    },
  );
}
