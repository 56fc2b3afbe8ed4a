import { newCorrelationId, parseTopic, topics, withCorrelation, type Logger } from '@tobira/shared';
import type { Link } from '../adapters/mqtt/links.js';
import { handleLockRequests, type AccessAnswer, type AccessDeps } from './access.js';
import type { LiveEvent } from './live-feed.js';
import { handleLockMessage, recordLockRefusal } from './locks.js';

/**
 * What arrives on the site broker, routed by topic: lock requests go to the
 * access path in group commits, state / event / presence to the lock
 * handlers, anything else is a refused lock message. Decisions (and unlock
 * commands) are published only after their commit.
 */
export interface SiteRequestsDeps extends AccessDeps {
  /** The site link now (null before it is connected). */
  readonly site: () => Link | null;
  /** True once the daemon is stopping: nothing more is taken. */
  readonly stopping: () => boolean;
  /** Lines of this router's own failures (the daemon's run log). */
  readonly runLog: Logger;
  /** Told after each commit what changed (the staff page's live feed); absent: nobody listens. */
  readonly changed?: (e: LiveEvent) => void;
}

/**
 * Publishes each answer's decision, then its command, at QoS 1 on the lock's
 * topics. A publish that fails is logged with the decision's cid: the lock
 * retries the same request id and gets the recorded decision again.
 */
export function publishAnswers(
  gatewayId: string,
  link: Link,
  log: Logger,
  answers: readonly { readonly lockId: string; readonly answer: AccessAnswer | null }[],
): void {
  for (const { lockId, answer } of answers) {
    if (answer === null) continue;
    const l = withCorrelation(log, answer.cid, { lockId, requestId: answer.decision.requestId });
    link
      .publish(topics.lock(gatewayId, lockId, 'decision'), JSON.stringify(answer.decision), { qos: 1 })
      .catch((e: unknown) => l.warn({ err: String(e) }, 'decision not published'));
    if (answer.command !== null) {
      link
        .publish(topics.lock(gatewayId, lockId, 'command'), JSON.stringify(answer.command), { qos: 1 })
        .catch((e: unknown) => l.warn({ err: String(e) }, 'command not published'));
    }
  }
}

/** The site-topic router: returns the handler of one site-broker message. */
export function siteMessageRouter(deps: SiteRequestsDeps): (topic: string, payload: Buffer) => void {
  const pending: { lockId: string; payload: Buffer }[] = [];
  const flush = () => {
    const batch = pending.splice(0);
    if (batch.length === 0 || deps.stopping()) return;
    let answers: ReturnType<typeof handleLockRequests>;
    try {
      answers = handleLockRequests(deps, batch);
    } catch (e) {
      // Nothing was committed, nothing is published: the locks stay locked and retry (fail closed).
      deps.runLog.error({ err: e, requests: batch.length }, 'lock requests not decided');
      return;
    }
    for (const [i, a] of answers.entries())
      if (a !== null && !a.replayed)
        deps.changed?.({ type: 'access', lockId: batch[i]!.lockId, allowed: a.decision.allowed, code: a.decision.code });
    const link = deps.site();
    if (link === null) return;
    publishAnswers(
      deps.gatewayId,
      link,
      deps.log,
      answers.map((answer, i) => ({ lockId: batch[i]!.lockId, answer })),
    );
  };

  return (topic, payload) => {
    if (deps.stopping()) return;
    const t = parseTopic(topic);
    if (t === null || t.kind !== 'lock' || t.gatewayId !== deps.gatewayId) {
      // Only this gateway's lock filters are subscribed: this is a lock id that is not a slug.
      const channel = topic.slice(topic.lastIndexOf('/') + 1);
      recordLockRefusal(deps, withCorrelation(deps.log, newCorrelationId()), {
        origin: 'gateway',
        lockId: null,
        channel,
        topic,
        code: 'BAD_TOPIC',
        detail: 'not a lock topic of this gateway',
        payload,
      });
      return;
    }
    try {
      if (t.channel === 'request') {
        // Group commit: requests that arrive in the same turn share one transaction (one fsync).
        pending.push({ lockId: t.lockId, payload });
        if (pending.length === 1) setImmediate(flush);
      } else if (t.channel === 'state' || t.channel === 'event' || t.channel === 'presence') {
        const o = handleLockMessage(deps, t.lockId, t.channel, payload);
        // a message dropped over the lock's event budget changed nothing the page shows
        if (o === 'throttled') deps.changed?.({ type: 'alarm', lockId: t.lockId });
        else if (o === 'taken')
          deps.changed?.(t.channel === 'event' ? { type: 'alarm', lockId: t.lockId } : { type: 'lock', lockId: t.lockId });
      }
    } catch (e) {
      deps.runLog.error({ err: e, topic }, 'site message handling failed');
    }
  };
}
