import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { newCorrelationId } from '@tobira/shared';
import { startStripeLocal, type StripeLocal } from '@tobira/stripe-local';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { System, expectApplied } from './system.js';

/**
 * A membership at the door: the real `stripe` SDK in
 * the cloud against the local Stripe, the signed webhooks through the
 * cloud's verified inbox, the key through the gateway to a sim lock. The
 * member pays and the PIN opens the member door; self-cancel stops the
 * subscription first and the PIN still opens until the period ends; then it
 * is refused.
 */
const SECRET = 'whsec_tobira_e2e_membership';

describe('a membership at the sim-lock door (embedded brokers and database)', () => {
  let local: StripeLocal;
  let sys: System;
  let receiver: Server;

  beforeAll(async () => {
    // Stripe's webhooks go to the cloud's own ingress (verify on the raw body, store in the inbox)
    receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const header = req.headers['stripe-signature'];
        sys.cloud.receiveStripeWebhook(Buffer.concat(chunks), typeof header === 'string' ? header : undefined, newCorrelationId()).then(
          (r) => {
            res.statusCode = r.status === 'refused' ? 400 : 200;
            res.end();
          },
          () => {
            res.statusCode = 500;
            res.end();
          },
        );
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const { port } = receiver.address() as AddressInfo;
    local = await startStripeLocal({ webhook: { url: `http://127.0.0.1:${port}/`, secret: SECRET }, seed: 'e2emem' });
    sys = await new System('embedded', {
      cloudEnv: {
        STRIPE_SECRET_KEY: local.secretKey,
        STRIPE_WEBHOOK_SECRET: SECRET,
        STRIPE_API_HOST: local.host,
        STRIPE_API_PORT: String(local.port),
        STRIPE_API_PROTOCOL: 'http',
      },
    }).start();
  });
  afterAll(async () => {
    await sys?.stop();
    await local?.close();
    await new Promise<void>((r) => receiver.close(() => r()));
  });

  const settle = async () => {
    await local.webhooks.idle();
    await sys.cloud.runBilling();
  };

  it('pays, opens the member door, self-cancels with billing stopped first, still opens until the period end, then is refused', async () => {
    const plan = expectApplied(
      await sys.cloud.createPlan({
        siteId: sys.siteId,
        name: 'Lounge',
        amount: 8000,
        currency: 'jpy',
        interval: 'month',
        doors: [sys.doors.L1 ?? ''],
      }),
      'createPlan',
    );
    const m = expectApplied(
      await sys.cloud.applyMembership({ planId: plan.id, personId: sys.personId, credential: { type: 'pin', value: '246813' } }),
      'applyMembership',
    );
    const approved = await sys.cloud.approveMembership({ membershipId: m.id, actor: 'staff' });
    expect(approved).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_APPROVED' });
    expect(local.payInvoice(approved.invoiceId ?? '').status).toBe(200);
    await settle();

    const keyId = `key_${m.id}_1`;
    await sys.waitKeyStatus(keyId, 'active');
    const open = await sys.fleet.lock('L1').present({ type: 'pin', value: '246813' }, { timeoutMs: 10_000 });
    expect(open.decision).toMatchObject({ allowed: true, code: 'ALLOWED' });
    const other = await sys.fleet.lock('L2').present({ type: 'pin', value: '246813' }, { timeoutMs: 10_000 });
    expect(other.decision).toMatchObject({ allowed: false, code: 'DOOR_NOT_PERMITTED' });

    const ending = await sys.cloud.selfCancelMembership({ membershipId: m.id });
    expect(ending).toMatchObject({ status: 'applied', code: 'MEMBERSHIP_ENDING' });
    const sub = ending.status === 'applied' ? (ending.state.subscriptionId ?? '') : '';
    expect(local.subscription(sub)).toMatchObject({ cancel_at_period_end: true, status: 'active' });
    await settle();
    const still = await sys.fleet.lock('L1').present({ type: 'pin', value: '246813' }, { timeoutMs: 10_000 });
    expect(still.decision).toMatchObject({ allowed: true, code: 'ALLOWED' });

    expect(local.advanceSubscription(sub).status).toBe(200);
    await settle();
    await sys.waitKeyStatus(keyId, 'revoked');
    const refused = await sys.fleet.lock('L1').present({ type: 'pin', value: '246813' }, { timeoutMs: 10_000 });
    expect(refused.decision).toMatchObject({ allowed: false, code: 'KEY_REVOKED' });
    // no unlock command is sent (the bolt may still be open from the last allowed entry's relock delay)
    expect(refused.command).toBeNull();
  });
});
