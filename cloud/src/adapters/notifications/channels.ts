import type { Logger, OutcomeCode } from '@tobira/shared';
import nodemailer from 'nodemailer';
import type { NotificationChannel } from '../../domain/notifications.js';
import { DeliveryTimeout, postWebhook, signWebhook } from '../webhooks/deliver.js';
import { EgressRefusedError, checkUrlShape, type ResolveAll } from '../webhooks/egress.js';
import type { ClaimedNotification } from './claim.js';

/**
 * The channels a notification is sent through (docs/notifications.md):
 * `log` (the default: one log line with the id and the template, never the
 * subject or body), `webhook` (one signed HTTP POST through the webhooks'
 * egress guard), `smtp` (nodemailer against the configured server).
 */

export type SendResult =
  | { readonly ok: true; readonly detail?: string }
  | { readonly ok: false; readonly code: OutcomeCode; readonly detail: string; readonly permanent: boolean };

export interface Channel {
  /** `now`: the dispatcher's clock (the webhook signature's time). */
  send(m: ClaimedNotification, now: number): Promise<SendResult>;
  close(): Promise<void>;
}

export interface SmtpSettings {
  readonly host: string;
  readonly port: number;
  /** the From address of every message */
  readonly from: string;
  /** TLS from the start (port 465); false: plain, upgraded by STARTTLS when the server offers it */
  readonly secure: boolean;
  readonly user?: string | undefined;
  readonly password?: string | undefined;
  /** connection, greeting and socket timeouts */
  readonly timeoutMs: number;
}

export interface NotificationWebhookSettings {
  readonly url: string;
  /** HMAC key of the `Tobira-Signature` header (as webhooks out); unset: unsigned */
  readonly secret?: string | undefined;
  readonly timeoutMs: number;
  /** the SSRF guard off (tests, a receiver on the local network) */
  readonly allowPrivateNetworks: boolean;
}

export interface ChannelSettings {
  readonly smtp: SmtpSettings | null;
  readonly webhook: NotificationWebhookSettings | null;
}

/** A stable Message-ID per row: a message sent twice (at least once, after a crash) is recognisable as one. */
export const messageIdOf = (m: Pick<ClaimedNotification, 'id' | 'dedupe_key'>): string =>
  `<notification-${m.id}.${Buffer.from(m.dedupe_key).toString('base64url')}@tobira>`;

export function logChannel(log: Logger): Channel {
  return {
    send(m) {
      // never the subject or the body: a message may one day carry something only its recipient may read
      log.child({ cid: m.cid }).info(
        {
          code: 'NOTIFICATION_SENT',
          channel: 'log',
          notificationId: m.id,
          template: m.template,
          locale: m.locale,
          personId: m.person_id,
        },
        'notification sent',
      );
      return Promise.resolve({ ok: true });
    },
    close: () => Promise.resolve(),
  };
}

export function smtpChannel(s: SmtpSettings): Channel {
  const transport = nodemailer.createTransport({
    host: s.host,
    port: s.port,
    secure: s.secure,
    connectionTimeout: s.timeoutMs,
    greetingTimeout: s.timeoutMs,
    socketTimeout: s.timeoutMs,
    ...(s.user !== undefined ? { auth: { user: s.user, pass: s.password ?? '' } } : {}),
  });
  return {
    async send(m) {
      if (m.address === null) return { ok: false, code: 'NOTIFICATION_NO_ADDRESS', detail: 'the person has no e-mail', permanent: true };
      try {
        const info = await transport.sendMail({
          from: s.from,
          to: m.address,
          subject: m.subject,
          text: m.body,
          messageId: messageIdOf(m),
          headers: { 'X-Correlation-Id': m.cid },
        });
        return { ok: true, detail: `smtp accepted (${info.accepted.length} recipient)` };
      } catch (e) {
        // nodemailer's error names the server's answer or the socket error; never the message
        const detail = e instanceof Error ? e.message : String(e);
        return { ok: false, code: 'NOTIFICATION_SMTP_FAILED', detail, permanent: false };
      }
    },
    close() {
      transport.close();
      return Promise.resolve();
    },
  };
}

export function webhookChannel(w: NotificationWebhookSettings, resolve?: ResolveAll): Channel {
  return {
    async send(m, now) {
      const shape = checkUrlShape(w.url, { allowPrivateNetworks: w.allowPrivateNetworks });
      if (!shape.ok) return { ok: false, code: 'NOTIFICATION_ADDRESS_FORBIDDEN', detail: shape.detail, permanent: false };
      const body = JSON.stringify({
        id: m.id,
        dedupeKey: m.dedupe_key,
        template: m.template,
        locale: m.locale,
        personId: m.person_id,
        siteId: m.site_id,
        subject: m.subject,
        body: m.body,
        cid: m.cid,
      });
      try {
        const status = await postWebhook(
          shape.url,
          {
            'content-type': 'application/json',
            'tobira-notification-id': String(m.id),
            'tobira-dedupe-key': m.dedupe_key,
            'x-correlation-id': m.cid,
            ...(w.secret !== undefined ? { 'tobira-signature': signWebhook(w.secret, now, body) } : {}),
          },
          body,
          { timeoutMs: w.timeoutMs, guard: !w.allowPrivateNetworks, resolve },
        );
        if (status >= 200 && status < 300) return { ok: true, detail: `HTTP ${status}` };
        return { ok: false, code: 'NOTIFICATION_WEBHOOK_FAILED', detail: `HTTP ${status}`, permanent: false };
      } catch (e) {
        if (e instanceof EgressRefusedError)
          return { ok: false, code: 'NOTIFICATION_ADDRESS_FORBIDDEN', detail: e.message, permanent: false };
        const detail = e instanceof DeliveryTimeout ? e.message : e instanceof Error ? e.message : String(e);
        return { ok: false, code: 'NOTIFICATION_WEBHOOK_FAILED', detail, permanent: false };
      }
    },
    close: () => Promise.resolve(),
  };
}

/** The channels this cloud can send through; an unconfigured one is absent (its rows fail with NOTIFICATION_CHANNEL_UNCONFIGURED). */
export function channelsOf(s: ChannelSettings, log: Logger, resolve?: ResolveAll): Partial<Record<NotificationChannel, Channel>> {
  return {
    log: logChannel(log),
    ...(s.smtp ? { smtp: smtpChannel(s.smtp) } : {}),
    ...(s.webhook ? { webhook: webhookChannel(s.webhook, resolve) } : {}),
  };
}
