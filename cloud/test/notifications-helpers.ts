import { createServer as createHttpServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SMTPServer, type SMTPServerAddress } from 'smtp-server';

/** A message the local SMTP server accepted, with its subject and text decoded. */
export interface ReceivedMail {
  readonly from: string;
  readonly to: string[];
  readonly raw: string;
  readonly subject: string;
  readonly text: string;
  readonly messageId: string;
}

/** RFC 2047 encoded words (`=?UTF-8?B?...?=` / `?Q?`), as nodemailer writes a non-ASCII subject. */
function decodeWords(v: string): string {
  return v.replace(/\s*=\?UTF-8\?([BQ])\?([^?]*)\?=\s*/gi, (_, enc: string, data: string) =>
    enc.toUpperCase() === 'B'
      ? Buffer.from(data, 'base64').toString('utf8')
      : Buffer.from(
          data.replace(/_/g, ' ').replace(/=([0-9A-F]{2})/gi, (_m, h: string) => String.fromCharCode(parseInt(h, 16))),
          'latin1',
        ).toString('utf8'),
  );
}

function headerOf(head: string, name: string): string {
  const m = new RegExp(`^${name}:(.*(?:\\r\\n[ \\t].*)*)`, 'im').exec(head);
  return (m?.[1] ?? '').replace(/\r\n[ \t]/g, ' ').trim();
}

function parseMail(raw: string): { subject: string; text: string; messageId: string } {
  const split = raw.indexOf('\r\n\r\n');
  const head = raw.slice(0, split);
  const body = raw.slice(split + 4);
  const cte = headerOf(head, 'Content-Transfer-Encoding').toLowerCase();
  let text = body;
  if (cte === 'base64') text = Buffer.from(body.replace(/\s+/g, ''), 'base64').toString('utf8');
  else if (cte === 'quoted-printable')
    text = Buffer.from(
      body.replace(/=\r\n/g, '').replace(/=([0-9A-F]{2})/gi, (_m, h: string) => String.fromCharCode(parseInt(h, 16))),
      'latin1',
    ).toString('utf8');
  return {
    subject: decodeWords(headerOf(head, 'Subject')),
    text: text.replace(/\r\n/g, '\n').trimEnd(),
    messageId: headerOf(head, 'Message-ID'),
  };
}

/**
 * A real SMTP server on a free local port (smtp-server), keeping what it
 * accepts. `reject`: recipients it answers 451 (a temporary failure) to.
 */
export async function startSmtp(opts: { reject?: (address: string) => boolean } = {}) {
  const mails: ReceivedMail[] = [];
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onRcptTo(address: SMTPServerAddress, _session, cb) {
      if (opts.reject?.(address.address)) {
        const e: Error & { responseCode?: number } = new Error('mailbox busy, try later');
        e.responseCode = 451;
        cb(e);
        return;
      }
      cb();
    },
    onData(stream, session, cb) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        const from = session.envelope.mailFrom === false ? '' : session.envelope.mailFrom.address;
        mails.push({ from, to: session.envelope.rcptTo.map((r) => r.address), raw, ...parseMail(raw) });
        cb();
      });
    },
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.server.address() as AddressInfo;
  return { port, mails, close: () => new Promise<void>((r) => server.close(() => r())) };
}

/** A TCP port nothing listens on (a server started and closed). */
export async function deadPort(): Promise<number> {
  const s = createHttpServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** An HTTP receiver answering `status()`; keeps each request's headers and JSON body. */
export async function startReceiver(status: () => number = () => 204) {
  const got: { headers: IncomingHttpHeaders; body: unknown }[] = [];
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      got.push({ headers: req.headers, body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown });
      res.statusCode = status();
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/notify`, got, close: () => new Promise<void>((r) => server.close(() => r())) };
}
