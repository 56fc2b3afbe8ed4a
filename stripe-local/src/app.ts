/**
 * The HTTP face: Stripe's v1 routes Tobira calls, and the `/_local/...`
 * control routes (faults, webhook endpoints and release, settling and paying
 * from a shell). Every /v1 request passes, in this order: API key → the
 * `unavailable` fault → idempotency claim → the `delayMs` fault → parameter
 * validation → the verb → events recorded and handed to the webhook
 * dispatcher → the `failAfterEffect` fault. See idempotency.ts for which
 * answers are stored.
 */
import Fastify, { LogController, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { z, type ZodType } from 'zod';
import { decodeForm, fingerprint, type Form } from './form.js';
import { ApiFaults, noFaults } from './faults.js';
import type { IdempotencyStore } from './idempotency.js';
import type { ConfirmMode, Ids, Ledger, VerbResult } from './ledger.js';
import { errorAnswer, type ApiAnswer } from './objects.js';
import {
  CancelPaymentIntentParams,
  CancelRefundParams,
  ConfirmPaymentIntentParams,
  CreatePaymentIntentParams,
  CreateRefundParams,
  ListEventsParams,
  ListInvoicePaymentsParams,
  ListRefundsParams,
  RetrieveParams,
  paramName,
  CancelSubscriptionParams,
  CreateCustomerParams,
  CreatePriceParams,
  CreateSubscriptionParams,
  PayInvoiceParams,
  UpdateSubscriptionParams,
} from './params.js';
import type { BillingBook } from './subscriptions.js';
import type { WebhookDispatcher } from './webhooks.js';

export interface AppDeps {
  ledger: Ledger;
  /** customers, prices, subscriptions, invoices */
  billing: BillingBook;
  ids: Ids;
  idempotency: IdempotencyStore;
  webhooks: WebhookDispatcher;
  faults: ApiFaults;
  secretKey: string;
  /** events' `api_version` when a request sends no `Stripe-Version` */
  apiVersion: string;
  log: Logger;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function presentedKey(req: FastifyRequest): string | null {
  const h = req.headers.authorization;
  if (typeof h !== 'string') return null;
  if (h.startsWith('Bearer ')) return h.slice(7).trim();
  // `curl -u sk_test_...:` sends Basic auth with the key as the user name
  if (h.startsWith('Basic ')) return Buffer.from(h.slice(6), 'base64').toString('utf8').split(':')[0] ?? null;
  return null;
}

function mask(key: string): string {
  return key.length > 12 ? `${key.slice(0, 8)}${'*'.repeat(key.length - 12)}${key.slice(-4)}` : '****';
}

function header(req: FastifyRequest, name: string): string | null {
  const v = req.headers[name];
  return typeof v === 'string' && v !== '' ? v : null;
}

function send(reply: FastifyReply, answer: ApiAnswer): FastifyReply {
  return reply
    .status(answer.status)
    .header('content-type', 'application/json')
    .send(JSON.stringify(answer.body, null, 2));
}

function resetConnection(req: FastifyRequest, reply: FastifyReply): void {
  reply.hijack();
  req.raw.socket.destroy();
}

function validationAnswer(error: z.ZodError): ApiAnswer {
  const issue = error.issues[0];
  if (!issue) return errorAnswer(400, { type: 'invalid_request_error', message: 'Invalid request.' });
  if (issue.code === 'unrecognized_keys') {
    const key = paramName([...issue.path, issue.keys[0] ?? '']);
    return errorAnswer(400, {
      type: 'invalid_request_error',
      code: 'parameter_unknown',
      param: key,
      message: `Received unknown parameter: ${key}`,
    });
  }
  const param = paramName(issue.path);
  if (issue.code === 'invalid_type' && issue.input === undefined) {
    return errorAnswer(400, {
      type: 'invalid_request_error',
      code: 'parameter_missing',
      param,
      message: `Missing required param: ${param}.`,
    });
  }
  return errorAnswer(400, {
    type: 'invalid_request_error',
    code: 'parameter_invalid',
    param,
    message: `Invalid ${param}: ${issue.message}`,
  });
}

export function buildApp(deps: AppDeps) {
  const { ledger, idempotency, webhooks, faults, log } = deps;
  const app = Fastify({
    loggerInstance: log,
    logController: new LogController({ requestIdLogLabel: 'cid' }),
    requestIdHeader: false,
    genReqId: () => deps.ids.next('req'),
    routerOptions: { ignoreTrailingSlash: true },
  });

  // Stripe bodies are form-encoded; decoded by the route (form.ts), not by Fastify
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_req, body, done) => done(null, body));

  const emit = (result: VerbResult, req: FastifyRequest): void => {
    const events = ledger.record(result.events, {
      // Stripe renders an event at the account's API version (and a webhook at its endpoint's), never at the
      // version the request that caused it sent
      apiVersion: deps.apiVersion,
      requestId: req.id,
      idempotencyKey: header(req, 'idempotency-key'),
      endpoints: webhooks.endpoints.length,
    });
    if (events.length > 0) req.log.info({ events: events.map((e) => `${e.type} ${e.id}`) }, 'events emitted');
    webhooks.dispatch(events);
  };

  const confirmMode = (): ConfirmMode => {
    if (faults.declineNextConfirms > 0) {
      faults.declineNextConfirms -= 1;
      return 'decline';
    }
    return faults.processing ? 'processing' : 'normal';
  };

  app.addHook('onRequest', async (req, reply) => {
    if (!req.url.startsWith('/v1/')) return;
    void reply.header('request-id', req.id).header('stripe-version', header(req, 'stripe-version') ?? deps.apiVersion);
    const key = presentedKey(req);
    if (key !== deps.secretKey) {
      // Stripe answers a bad key with type invalid_request_error and 401 (stripe-node: StripeAuthenticationError)
      const message =
        key === null
          ? "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."
          : `Invalid API Key provided: ${mask(key)}`;
      return send(reply, errorAnswer(401, { type: 'invalid_request_error', message }));
    }
    if (faults.unavailable || faults.unavailableRequests > 0) {
      if (faults.unavailableRequests > 0) faults.unavailableRequests -= 1;
      req.log.info({ mode: faults.unavailableMode }, 'fault: unavailable');
      if (faults.unavailableMode === 'reset') return resetConnection(req, reply);
      return send(
        reply,
        errorAnswer(503, { type: 'api_error', message: 'The Stripe API is temporarily unavailable (stripe-local fault).' }),
      );
    }
    return undefined;
  });

  const rawQuery = (req: FastifyRequest): string => {
    const i = req.url.indexOf('?');
    return i < 0 ? '' : req.url.slice(i + 1);
  };

  /** A read: no idempotency, no events. */
  const read =
    <S extends ZodType>(schema: S, run: (params: z.infer<S>, id: string) => ApiAnswer) =>
    async (req: FastifyRequest<{ Params: { id?: string } }>, reply: FastifyReply) => {
      if (faults.delayMs > 0) await sleep(faults.delayMs);
      const parsed = schema.safeParse(decodeForm(rawQuery(req)));
      if (!parsed.success) return send(reply, validationAnswer(parsed.error));
      return send(reply, run(parsed.data, req.params.id ?? ''));
    };

  /** A write: claimed under its idempotency key, run once, its answer stored. */
  const write =
    <S extends ZodType>(schema: S, run: (params: z.infer<S>, id: string) => VerbResult) =>
    async (req: FastifyRequest<{ Params: { id?: string } }>, reply: FastifyReply) => {
      // DELETE may carry its parameters in the query string
      const form: Form = decodeForm(typeof req.body === 'string' && req.body !== '' ? req.body : rawQuery(req));
      const key = header(req, 'idempotency-key');
      const path = req.url.split('?')[0] ?? req.url;
      if (key !== null) {
        void reply.header('idempotency-key', key);
        const claim = idempotency.claim(deps.secretKey, key, fingerprint(req.method, path, form), req.id);
        switch (claim.kind) {
          case 'mismatch':
            return send(
              reply,
              errorAnswer(400, {
                type: 'idempotency_error',
                message: `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${key}' if you meant to execute a different request.`,
              }),
            );
          case 'in_flight':
            return send(
              reply,
              errorAnswer(409, {
                type: 'idempotency_error',
                code: 'idempotency_key_in_use',
                message:
                  'There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): ' +
                  key +
                  '. Please try again later.',
              }),
            );
          case 'replay':
            req.log.info({ idempotencyKey: key, status: claim.answer.status }, 'idempotent replay');
            return send(reply.header('idempotent-replayed', 'true').header('original-request', claim.originalRequest), claim.answer);
          case 'fresh':
            break;
        }
      }
      try {
        if (faults.delayMs > 0) await sleep(faults.delayMs);
        const parsed = schema.safeParse(form);
        if (!parsed.success) {
          if (key !== null) idempotency.release(deps.secretKey, key);
          return send(reply, validationAnswer(parsed.error));
        }
        const result = run(parsed.data, req.params.id ?? '');
        if (key !== null) idempotency.save(deps.secretKey, key, result.answer);
        emit(result, req);
        if (faults.failAfterEffect > 0) {
          faults.failAfterEffect -= 1;
          req.log.info({ mode: faults.failAfterEffectMode, status: result.answer.status }, 'fault: effect done, answer lost');
          if (faults.failAfterEffectMode === 'reset') return resetConnection(req, reply);
          return send(
            reply,
            errorAnswer(500, { type: 'api_error', message: 'An unknown error occurred (stripe-local fault: the request took effect).' }),
          );
        }
        return send(reply, result.answer);
      } catch (err) {
        // a bug here, not a Stripe answer: free the key so the retry can run
        if (key !== null) idempotency.release(deps.secretKey, key);
        throw err;
      }
    };

  app.post(
    '/v1/payment_intents',
    write(CreatePaymentIntentParams, (p) => ledger.createPaymentIntent(p, confirmMode)),
  );
  app.get(
    '/v1/payment_intents/:id',
    read(RetrieveParams, (_p, id) => ledger.retrievePaymentIntent(id)),
  );
  app.post(
    '/v1/payment_intents/:id/confirm',
    write(ConfirmPaymentIntentParams, (p, id) => ledger.confirmPaymentIntent(id, p, confirmMode)),
  );
  app.post(
    '/v1/payment_intents/:id/cancel',
    write(CancelPaymentIntentParams, (p, id) => ledger.cancelPaymentIntent(id, p)),
  );
  app.post(
    '/v1/refunds',
    write(CreateRefundParams, (p) => {
      const refuse = faults.failNextRefunds > 0;
      if (refuse) faults.failNextRefunds -= 1;
      return ledger.createRefund(p, { pending: faults.refundsPending, requireAction: faults.refundsRequireAction, refuse });
    }),
  );
  app.get(
    '/v1/refunds',
    read(ListRefundsParams, (p) => ledger.listRefunds(p)),
  );
  app.post(
    '/v1/refunds/:id/cancel',
    write(CancelRefundParams, (_p, id) => ledger.cancelRefund(id)),
  );
  app.get(
    '/v1/refunds/:id',
    read(RetrieveParams, (_p, id) => ledger.retrieveRefund(id)),
  );
  app.get(
    '/v1/events/:id',
    read(RetrieveParams, (_p, id) => ledger.retrieveEvent(id)),
  );
  app.get(
    '/v1/events',
    read(ListEventsParams, (p) => ledger.listEvents(p)),
  );

  const { billing } = deps;
  app.post(
    '/v1/customers',
    write(CreateCustomerParams, (p) => billing.createCustomer(p)),
  );
  app.get(
    '/v1/customers/:id',
    read(RetrieveParams, (_p, id) => billing.retrieveCustomer(id)),
  );
  app.post(
    '/v1/prices',
    write(CreatePriceParams, (p) => billing.createPrice(p)),
  );
  app.get(
    '/v1/prices/:id',
    read(RetrieveParams, (_p, id) => billing.retrievePrice(id)),
  );
  app.post(
    '/v1/subscriptions',
    write(CreateSubscriptionParams, (p) => billing.createSubscription(p)),
  );
  app.get(
    '/v1/subscriptions/:id',
    read(RetrieveParams, (_p, id) => billing.retrieveSubscription(id)),
  );
  app.post(
    '/v1/subscriptions/:id',
    write(UpdateSubscriptionParams, (p, id) => billing.updateSubscription(id, p)),
  );
  app.delete(
    '/v1/subscriptions/:id',
    write(CancelSubscriptionParams, (p, id) => billing.cancelSubscription(id, p)),
  );
  app.get(
    '/v1/invoices/:id',
    read(RetrieveParams, (_p, id) => billing.retrieveInvoice(id)),
  );
  app.get(
    '/v1/invoice_payments',
    read(ListInvoicePaymentsParams, (p) => billing.listInvoicePayments(p)),
  );
  app.post(
    '/v1/invoices/:id/pay',
    write(PayInvoiceParams, (p, id) => billing.payInvoice(id, p)),
  );

  // --- control routes: JSON in and out, no API key (a local test double) ---

  const body = <S extends ZodType>(schema: S, req: FastifyRequest, reply: FastifyReply): z.infer<S> | undefined => {
    const parsed = schema.safeParse(req.body ?? {});
    if (parsed.success) return parsed.data;
    void reply.status(400).send({ error: 'invalid body', issues: parsed.error.issues });
    return undefined;
  };

  app.get('/_local/health', async () => ({ ok: true }));

  app.get('/_local/faults', async () => ({ api: faults, webhooks: webhooks.faults }));
  app.post('/_local/faults', async (req, reply) => {
    const patch = body(
      z.strictObject({
        api: ApiFaults.partial().optional(),
        webhooks: z
          .strictObject({ duplicates: z.number().int().min(1), hold: z.boolean(), drop: z.boolean() })
          .partial()
          .optional(),
      }),
      req,
      reply,
    );
    if (!patch) return reply;
    Object.assign(faults, patch.api ?? {});
    Object.assign(webhooks.faults, patch.webhooks ?? {});
    req.log.info({ api: faults, webhooks: webhooks.faults }, 'faults set');
    return { api: faults, webhooks: webhooks.faults };
  });
  app.post('/_local/faults/reset', async () => {
    Object.assign(faults, noFaults());
    Object.assign(webhooks.faults, { duplicates: 1, hold: false, drop: false });
    return { api: faults, webhooks: webhooks.faults };
  });

  app.get('/_local/webhooks', async () => ({
    endpoints: webhooks.endpoints.map((e) => ({ url: e.url })),
    held: webhooks.heldEvents().map((e) => ({ id: e.id, type: e.type })),
    dropped: webhooks.droppedEvents().map((e) => ({ id: e.id, type: e.type })),
    attempts: webhooks.attempts,
  }));
  app.post('/_local/webhooks/endpoints', async (req, reply) => {
    const ep = body(z.strictObject({ url: z.url(), secret: z.string().startsWith('whsec_') }), req, reply);
    if (!ep) return reply;
    webhooks.addEndpoint(ep);
    return { endpoints: webhooks.endpoints.map((e) => ({ url: e.url })) };
  });
  app.post('/_local/webhooks/flush', async (req, reply) => {
    const opts = body(
      z.strictObject({ order: z.enum(['fifo', 'reverse', 'shuffle']).optional(), seed: z.number().int().optional() }),
      req,
      reply,
    );
    if (!opts) return reply;
    return { released: webhooks.release(opts.order ?? 'fifo', opts.seed ?? 1) };
  });

  app.post<{ Params: { id: string } }>('/_local/payment_intents/:id/settle', async (req, reply) => {
    const opts = body(z.strictObject({ outcome: z.enum(['succeeded', 'failed']) }), req, reply);
    if (!opts) return reply;
    const result = ledger.settle(req.params.id, opts.outcome);
    emit(result, req);
    return send(reply, result.answer);
  });

  app.post<{ Params: { id: string } }>('/_local/refunds/:id/settle', async (req, reply) => {
    const opts = body(z.strictObject({ outcome: z.enum(['succeeded', 'failed', 'canceled']) }), req, reply);
    if (!opts) return reply;
    const result = ledger.settleRefund(req.params.id, opts.outcome);
    emit(result, req);
    return send(reply, result.answer);
  });

  // the demo's "pay it": a test card through the local server, the way a browser would confirm
  app.get<{ Params: { id: string }; Querystring: { card?: string } }>('/_local/pay/:id', async (req, reply) => {
    const result = ledger.confirmPaymentIntent(req.params.id, { payment_method: req.query.card ?? 'pm_card_visa' }, confirmMode);
    emit(result, req);
    return send(reply, result.answer);
  });

  // the demo's "pay the first invoice": a test card, the way the member's browser would
  app.get<{ Params: { id: string }; Querystring: { card?: string } }>('/_local/invoices/:id/pay', async (req, reply) => {
    const result = billing.payInvoice(req.params.id, { payment_method: req.query.card ?? 'pm_card_visa' });
    emit(result, req);
    return send(reply, result.answer);
  });

  // the period boundary: renewal paid or failed, or the end of a subscription set to cancel at period end
  app.post<{ Params: { id: string } }>('/_local/subscriptions/:id/advance', async (req, reply) => {
    const opts = body(z.strictObject({ outcome: z.enum(['paid', 'failed']).optional() }), req, reply);
    if (!opts) return reply;
    const result = billing.advance(req.params.id, opts.outcome ?? 'paid');
    emit(result, req);
    return send(reply, result.answer);
  });

  // Stripe's retries of a failed renewal are over: canceled for payment_failed
  app.post<{ Params: { id: string } }>('/_local/subscriptions/:id/give_up', async (req, reply) => {
    const result = billing.giveUp(req.params.id);
    emit(result, req);
    return send(reply, result.answer);
  });

  app.setNotFoundHandler((req, reply) => {
    const path = req.url.split('?')[0] ?? req.url;
    return send(
      reply,
      errorAnswer(404, {
        type: 'invalid_request_error',
        message: `Unrecognized request URL (${req.method}: ${path}). Please see https://stripe.com/docs or we can help at https://support.stripe.com/.`,
      }),
    );
  });

  app.setErrorHandler((err, req, reply) => {
    req.log.error({ err }, 'stripe-local failed');
    return send(reply, errorAnswer(500, { type: 'api_error', message: `An unknown error occurred (request ${req.id}).` }));
  });

  return app;
}
