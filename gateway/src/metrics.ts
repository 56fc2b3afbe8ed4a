import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';

/** Prometheus metrics of one gateway, on its own registry (several gateways can run in one test process). */
export interface Metrics {
  readonly registry: Registry;
  readonly decisions: Counter<'code'>;
  readonly rejected: Counter<'code'>;
  readonly applied: Counter<'type' | 'result'>;
  readonly applyFailures: Counter;
  readonly seqConflicts: Counter;
  readonly outboxRefused: Counter<'type'>;
  readonly uplinkSent: Counter;
  readonly uplinkResent: Counter;
  readonly uplinkBatches: Counter;
  readonly lockMessagesRefused: Counter<'channel' | 'code'>;
}

export interface MetricSources {
  inboxDepth(): number;
  outboxDepth(): number;
  leaseRemainingSeconds(): number;
  locks(): readonly { lockId: string; online: boolean }[];
  storage?(): { readonly low: boolean; readonly freeBytes: number | null };
}

export function createMetrics(defaults = false): Metrics & { bind(src: MetricSources): void } {
  const registry = new Registry();
  if (defaults) collectDefaultMetrics({ register: registry });
  let src: MetricSources | null = null;
  const m = {
    registry,
    decisions: new Counter({
      name: 'tobira_gateway_decisions_total',
      help: 'Door decisions by code.',
      labelNames: ['code'] as const,
      registers: [registry],
    }),
    rejected: new Counter({
      name: 'tobira_gateway_downlink_rejected_total',
      help: 'Downlink messages refused by verification, by code.',
      labelNames: ['code'] as const,
      registers: [registry],
    }),
    applied: new Counter({
      name: 'tobira_gateway_inbox_applied_total',
      help: 'Inbox messages applied, by type and result.',
      labelNames: ['type', 'result'] as const,
      registers: [registry],
    }),
    applyFailures: new Counter({
      name: 'tobira_gateway_inbox_apply_failures_total',
      help: 'Failed apply attempts.',
      registers: [registry],
    }),
    seqConflicts: new Counter({
      name: 'tobira_gateway_seq_conflicts_total',
      help: 'Messages for a seq already applied under another id (the cloud history differs; the site fails closed until a snapshot).',
      registers: [registry],
    }),
    outboxRefused: new Counter({
      name: 'tobira_gateway_outbox_refused_total',
      help: 'Non-essential uplink rows refused because the outbox was full.',
      labelNames: ['type'] as const,
      registers: [registry],
    }),
    uplinkSent: new Counter({
      name: 'tobira_gateway_uplink_sent_total',
      help: 'Uplink messages acked by the cloud broker.',
      registers: [registry],
    }),
    uplinkResent: new Counter({
      name: 'tobira_gateway_uplink_resent_total',
      help: 'Uplink messages sent again because the cloud had not acknowledged applying them in time.',
      registers: [registry],
    }),
    uplinkBatches: new Counter({
      name: 'tobira_gateway_uplink_batches_total',
      help: 'uplink.batch messages acked by the cloud broker (each carries several outbox rows under one signature).',
      registers: [registry],
    }),
    lockMessagesRefused: new Counter({
      name: 'tobira_gateway_lock_messages_refused_total',
      help: 'Site-broker messages refused, by channel and code.',
      labelNames: ['channel', 'code'] as const,
      registers: [registry],
    }),
    bind(s: MetricSources) {
      src = s;
    },
  };
  new Gauge({
    name: 'tobira_gateway_inbox_depth',
    help: 'Pending inbox rows.',
    registers: [registry],
    collect() {
      if (src) this.set(src.inboxDepth());
    },
  });
  new Gauge({
    name: 'tobira_gateway_outbox_depth',
    help: 'Pending outbox rows.',
    registers: [registry],
    collect() {
      if (src) this.set(src.outboxDepth());
    },
  });
  new Gauge({
    name: 'tobira_gateway_lease_remaining_seconds',
    help: 'Seconds left on the freshness lease (0: failing closed).',
    registers: [registry],
    collect() {
      if (src) this.set(src.leaseRemainingSeconds());
    },
  });
  new Gauge({
    name: 'tobira_gateway_storage_low',
    help: 'Data folder below its free-disk headroom (1: ordinary keys refused STORAGE_FULL).',
    registers: [registry],
    collect() {
      const st = src?.storage?.();
      if (st) this.set(st.low ? 1 : 0);
    },
  });
  new Gauge({
    name: 'tobira_gateway_storage_free_bytes',
    help: 'Free bytes on the data folder file system at the last check.',
    registers: [registry],
    collect() {
      const free = src?.storage?.().freeBytes;
      if (free !== undefined && free !== null) this.set(free);
    },
  });
  new Gauge({
    name: 'tobira_gateway_lock_online',
    help: 'Lock availability (1 online, 0 offline).',
    labelNames: ['lock'] as const,
    registers: [registry],
    collect() {
      if (src) for (const l of src.locks()) this.set({ lock: l.lockId }, l.online ? 1 : 0);
    },
  });
  return m;
}
