import type { FastifyInstance } from 'fastify';
import type { LiveStream, Numbered } from '../../app/live-feed.js';
import { authOf, type HttpDeps } from '../context.js';
import { NoQuery, query } from '../query.js';

/**
 * Open live streams allowed: per session (a few tabs), per account (a few
 * devices: one account signed in many times must not take every stream), and
 * in all (a small device serving a front desk). The API token is one account.
 */
export const LIVE_STREAM_LIMITS = Object.freeze({ perSession: 4, perAccount: 8, total: 32 });

/** How often an open stream checks that its session still lives, and sends a comment line through idle proxies. */
const CHECK_MS = 2000;
const PING_EVERY = 8;

const frame = (n: Numbered) => `id: ${n.id}\nevent: ${n.event.type}\ndata: ${JSON.stringify(n.event)}\n\n`;

/**
 * GET /staff/events: the live feed as server-sent events (app/live-feed.ts),
 * behind the same auth as every staff read (session cookie, or the API token).
 * A session's stream ends within CHECK_MS of its sign-out, its account being
 * disabled, or its timeouts (without keeping the session alive); the gateway
 * stopping ends every stream. Over the stream limits: 429 TOO_MANY_STREAMS
 * (the page then polls). `retry: 2000` asks the browser to reconnect after two
 * seconds; Last-Event-ID replays what was missed, or the first event is
 * `resync`.
 */
export async function eventsRoutes(staff: FastifyInstance, deps: HttpDeps): Promise<void> {
  const live = deps.live;
  if (live === undefined) return;
  const limits = { ...LIVE_STREAM_LIMITS, ...deps.liveStreamLimits };
  const perKey = new Map<string, number>();
  const perAccount = new Map<string, number>();
  const down = (m: Map<string, number>, k: string) => {
    const left = (m.get(k) ?? 1) - 1;
    if (left <= 0) m.delete(k);
    else m.set(k, left);
  };

  staff.addHook('preClose', async () => {
    live.endAll();
  });

  staff.get('/staff/events', async (req, reply) => {
    query(NoQuery, req);
    const auth = authOf(req);
    const key = auth.session?.sessionHash ?? 'api-token';
    const account = auth.actor.accountId ?? 'api-token';
    const open = perKey.get(key) ?? 0;
    const ofAccount = perAccount.get(account) ?? 0;
    if (open >= limits.perSession || ofAccount >= limits.perAccount || live.streamCount >= limits.total) {
      req.log.warn({ code: 'TOO_MANY_STREAMS', open, ofAccount, total: live.streamCount }, 'live stream refused');
      return reply.status(429).header('retry-after', '30').send({ code: 'TOO_MANY_STREAMS' });
    }
    const h = req.headers['last-event-id'];
    const lastEventId = typeof h === 'string' && /^\d{1,15}$/.test(h) ? Number(h) : null;

    void reply.hijack();
    const res = reply.raw;
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      'x-accel-buffering': 'no',
      'x-correlation-id': req.id,
    });
    res.write('retry: 2000\n\n');
    perKey.set(key, open + 1);
    perAccount.set(account, ofAccount + 1);

    let ended = false;
    let ticks = 0;
    const timer = setInterval(() => {
      if (auth.session !== null && deps.accounts?.stillLive(auth.session.sessionHash) !== true) {
        req.log.info({ accountId: auth.actor.accountId }, 'live stream ended: the session is over');
        stream.end();
        return;
      }
      if (++ticks % PING_EVERY === 0) res.write(': ping\n\n');
    }, CHECK_MS);
    timer.unref();

    const stream: LiveStream = {
      send: (n) => {
        res.write(frame(n));
      },
      end: () => {
        if (ended) return;
        ended = true;
        clearInterval(timer);
        live.detach(stream);
        down(perKey, key);
        down(perAccount, account);
        // A stream's connection is never reused: closing it means the server's close does not wait on it.
        res.end(() => res.socket?.destroy());
      },
    };
    res.on('close', () => stream.end());
    const { missed, resync } = live.attach(stream, lastEventId);
    if (resync) res.write(`event: resync\ndata: {}\n\n`);
    for (const n of missed) res.write(frame(n));
    req.log.info({ accountId: auth.actor.accountId, lastEventId, replayed: missed.length, resync }, 'live stream opened');
  });
}
