import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ManualClock } from '@tobira/shared';
import type { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { z } from 'zod';
import { processMetrics } from '../../cloud/src/adapters/metrics/process.js';
import { cloudMetrics } from '../../cloud/src/http/metrics.js';
import { createMetrics } from '../../gateway/src/metrics.js';

/**
 * deploy/prometheus/alerts.yml and deploy/grafana/tobira-cloud.json name only
 * metrics and labels the cloud or the gateway export, and hold together
 * (without promtool: the YAML is parsed and checked here, the PromQL
 * checked for what a typo breaks).
 */
const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

interface Exported {
  readonly type: string;
  readonly labels: readonly string[];
}

/** Every metric the cloud's GET /metrics and a gateway's /metrics can export, with its labels (none is scraped: nothing is read). */
function exported(): Map<string, Exported> {
  const db = {
    query: () => Promise.reject(new Error('not scraped')),
    exec: () => Promise.reject(new Error('not scraped')),
  };
  const cloud = cloudMetrics(db, new ManualClock(0), processMetrics({ backend: () => null, pool: () => null }).registry).registry;
  const out = new Map<string, Exported>();
  const add = (r: Registry) => {
    for (const m of r.getMetricsAsArray()) {
      // prom-client keeps a metric's label names on the instance; its types do not say so
      const labels = (m as unknown as { labelNames?: string[] }).labelNames ?? [];
      out.set(m.name, { type: String(m.type), labels });
    }
  };
  add(cloud);
  add(createMetrics().registry);
  return out;
}

/** Labels Prometheus adds to every scraped series, and the series it makes itself. */
const TARGET_LABELS = ['instance', 'job'];
const PROMETHEUS_SERIES: Record<string, readonly string[]> = { up: [] };
const HISTOGRAM_SUFFIXES = ['_bucket', '_sum', '_count'];
const FUNCTIONS = new Set([
  'sum',
  'max',
  'min',
  'avg',
  'count',
  'rate',
  'irate',
  'increase',
  'histogram_quantile',
  'by',
  'without',
  'vector',
  'or',
  'and',
  'unless',
  'on',
  'ignoring',
  'bool',
]);

/** What is wrong with one PromQL expression against the exported metrics; the labels its result keeps (for `$labels` in annotations). */
export function checkExpr(expr: string, metrics: Map<string, Exported>): { problems: string[]; keeps: Set<string> } {
  const problems: string[] = [];
  const pairs: Record<string, string> = { '(': ')', '{': '}', '[': ']' };
  const stack: string[] = [];
  let quoted = false;
  for (const ch of expr) {
    if (ch === '"') quoted = !quoted;
    if (quoted) continue;
    if (pairs[ch]) stack.push(pairs[ch]);
    else if (Object.values(pairs).includes(ch) && stack.pop() !== ch) problems.push(`unbalanced ${ch}`);
  }
  if (stack.length > 0 || quoted) problems.push('unbalanced brackets or quotes');

  const referenced = new Map<string, readonly string[]>();
  // identifiers outside strings and label braces: metric names and functions
  const bare = expr.replace(/"(?:[^"\\]|\\.)*"/g, '""').replace(/\{[^}]*\}/g, '{}');
  for (const [, word] of bare.matchAll(/(?<![\w$.])([a-zA-Z_:][\w:]*)(?=\s*[{(\s)=<>!*/+,[-]|$)/g)) {
    if (word === undefined || FUNCTIONS.has(word) || /^\d/.test(word)) continue;
    // the labels of `by (...)` are checked below
    if (new RegExp(`(?:by|without|on|ignoring)\\s*\\([^)]*\\b${word}\\b[^)]*\\)`).test(bare)) continue;
    const base = HISTOGRAM_SUFFIXES.reduce(
      (n, sfx) => (n.endsWith(sfx) && metrics.get(n.slice(0, -sfx.length))?.type === 'histogram' ? n.slice(0, -sfx.length) : n),
      word,
    );
    const m = metrics.get(base);
    if (m) referenced.set(word, [...m.labels, ...(word.endsWith('_bucket') ? ['le'] : [])]);
    else if (PROMETHEUS_SERIES[word]) referenced.set(word, PROMETHEUS_SERIES[word]);
    else problems.push(`${word} is not exported`);
  }
  // label matchers name labels of their metric
  for (const [, name, matchers] of expr.matchAll(/([a-zA-Z_:][\w:]*)\{([^}]*)\}/g)) {
    const labels = referenced.get(name ?? '');
    if (!labels) continue;
    for (const [, label] of (matchers ?? '').matchAll(/([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)\s*"/g))
      if (!labels.includes(label ?? '') && !TARGET_LABELS.includes(label ?? '')) problems.push(`${name} has no label ${label}`);
  }
  const all = new Set([...[...referenced.values()].flat(), ...TARGET_LABELS]);
  const keeps = new Set<string>();
  const groupings = [...expr.matchAll(/\bby\s*\(([^)]*)\)/g)].map((m) => (m[1] ?? '').split(',').map((x) => x.trim()));
  for (const group of groupings)
    for (const label of group) if (label !== '' && !all.has(label)) problems.push(`by (${label}): no metric here has it`);
  // the outermost aggregation decides what the result keeps; none: the metric's own labels
  const outer = /^\s*\w+\s+by\s*\(([^)]*)\)/.exec(expr) ?? /^\s*\w+\s*\(.*\)\s*by\s*\(([^)]*)\)\s*$/.exec(expr);
  if (outer) for (const l of (outer[1] ?? '').split(',')) keeps.add(l.trim());
  else if (!/^\s*(sum|max|min|avg|count|histogram_quantile)\b/.test(expr)) for (const l of all) keeps.add(l);
  else if (/^\s*histogram_quantile/.test(expr)) for (const g of groupings) for (const l of g) if (l !== 'le') keeps.add(l);
  return { problems, keeps };
}

const Rule = z.strictObject({
  alert: z.string().regex(/^Tobira[A-Za-z]+$/),
  expr: z.string().min(1),
  for: z
    .string()
    .regex(/^\d+[smhd]$/)
    .optional(),
  labels: z.strictObject({ severity: z.enum(['critical', 'warning']) }),
  annotations: z.strictObject({ summary: z.string().min(1), description: z.string().min(1).optional() }),
});
const Rules = z.strictObject({ groups: z.array(z.strictObject({ name: z.string().min(1), rules: z.array(Rule).min(1) })).min(1) });

/** Everything wrong with an alert rules document. */
function checkRules(doc: unknown, metrics: Map<string, Exported>): string[] {
  const parsed = Rules.safeParse(doc);
  if (!parsed.success) return parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
  const problems: string[] = [];
  const names = new Set<string>();
  for (const rule of parsed.data.groups.flatMap((g) => g.rules)) {
    if (names.has(rule.alert)) problems.push(`${rule.alert}: repeated`);
    names.add(rule.alert);
    const { problems: p, keeps } = checkExpr(rule.expr, metrics);
    problems.push(...p.map((x) => `${rule.alert}: ${x}`));
    const text = `${rule.annotations.summary} ${rule.annotations.description ?? ''}`;
    for (const [, label] of text.matchAll(/\$labels\.(\w+)/g))
      if (!keeps.has(label ?? '')) problems.push(`${rule.alert}: $labels.${label} is not kept by its expression`);
  }
  return problems;
}

const Panel = z.object({
  id: z.int(),
  type: z.string(),
  title: z.string().min(1),
  gridPos: z.object({ h: z.int(), w: z.int(), x: z.int(), y: z.int() }),
  targets: z.array(z.object({ refId: z.string(), expr: z.string().min(1) })).optional(),
});
const Dashboard = z.object({ title: z.string(), uid: z.string(), panels: z.array(Panel).min(1) });

function checkDashboard(doc: unknown, metrics: Map<string, Exported>): string[] {
  const parsed = Dashboard.safeParse(doc);
  if (!parsed.success) return parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
  const problems: string[] = [];
  const ids = new Set<number>();
  for (const panel of parsed.data.panels) {
    if (ids.has(panel.id)) problems.push(`panel id ${panel.id} repeated`);
    ids.add(panel.id);
    if (panel.gridPos.x + panel.gridPos.w > 24) problems.push(`${panel.title}: wider than the grid`);
    if (panel.type !== 'row' && (panel.targets ?? []).length === 0) problems.push(`${panel.title}: no query`);
    for (const t of panel.targets ?? []) problems.push(...checkExpr(t.expr, metrics).problems.map((x) => `${panel.title}: ${x}`));
  }
  return problems;
}

const read = (path: string) => readFileSync(resolve(repo, path), 'utf8');

describe('deploy/ monitoring', () => {
  const metrics = exported();

  it('the alert rules parse and name only exported metrics and labels, and annotations only labels their expression keeps', () => {
    expect(checkRules(parse(read('deploy/prometheus/alerts.yml')), metrics)).toEqual([]);
  });

  it('has the alerts the operator needs: failing closed, outbox age, dead letters (downlinks, notifications), webhook failures', () => {
    const doc = Rules.parse(parse(read('deploy/prometheus/alerts.yml')));
    const exprs = doc.groups.flatMap((g) => g.rules).map((r) => r.expr);
    for (const needed of [
      'tobira_cloud_gateway_failing_closed',
      'tobira_cloud_outbox_oldest_age_seconds',
      'tobira_cloud_gateway_dead_letters',
      'tobira_cloud_queue_rows{queue="notification", status="dead"}',
      'tobira_cloud_webhook_deliveries_total',
    ])
      expect(
        exprs.some((e) => e.includes(needed)),
        needed,
      ).toBe(true);
  });

  it('the Grafana dashboard parses and its queries name only exported metrics and labels', () => {
    expect(checkDashboard(JSON.parse(read('deploy/grafana/tobira-cloud.json')), metrics)).toEqual([]);
  });

  it('the example Prometheus config loads the rules and scrapes the cloud with a token', () => {
    const cfg = z
      .object({
        rule_files: z.array(z.string()),
        scrape_configs: z.array(z.object({ job_name: z.string(), authorization: z.object({ type: z.literal('Bearer') }).optional() })),
      })
      .parse(parse(read('deploy/prometheus/prometheus.yml')));
    expect(cfg.rule_files).toContain('alerts.yml');
    expect(cfg.scrape_configs.find((j) => j.job_name === 'tobira-cloud')?.authorization?.type).toBe('Bearer');
  });

  describe('the checks themselves', () => {
    const rule = (over: Record<string, unknown>) => ({
      groups: [
        {
          name: 'g',
          rules: [
            {
              alert: 'TobiraX',
              expr: 'max by (gateway_id) (tobira_cloud_gateway_failing_closed) == 1',
              labels: { severity: 'warning' },
              annotations: { summary: 's {{ $labels.gateway_id }}' },
              ...over,
            },
          ],
        },
      ],
    });
    it('accept a good rule', () => {
      expect(checkRules(rule({}), metrics)).toEqual([]);
    });
    it('refuse a metric nobody exports, a label it does not have, a lost $labels, a bad duration, unbalanced brackets', () => {
      expect(checkRules(rule({ expr: 'max by (gateway_id) (tobira_cloud_gateway_failing_closd) == 1' }), metrics)).toEqual([
        'TobiraX: tobira_cloud_gateway_failing_closd is not exported',
        'TobiraX: by (gateway_id): no metric here has it',
      ]);
      expect(
        checkRules(rule({ expr: 'max by (gateway_id) (tobira_cloud_queue_rows{queue="webhook", state="dead"}) > 0' }), metrics),
      ).toEqual(['TobiraX: tobira_cloud_queue_rows has no label state', 'TobiraX: by (gateway_id): no metric here has it']);
      expect(checkRules(rule({ expr: 'max(tobira_cloud_gateway_failing_closed) == 1' }), metrics)).toEqual([
        'TobiraX: $labels.gateway_id is not kept by its expression',
      ]);
      expect(checkRules(rule({ for: '5 minutes' }), metrics)).not.toEqual([]);
      expect(checkRules(rule({ expr: 'max by (gateway_id) (tobira_cloud_gateway_failing_closed == 1' }), metrics)).toContain(
        'TobiraX: unbalanced brackets or quotes',
      );
    });
    it('know histogram series and gateway metrics, and refuse a dashboard query with a typo', () => {
      expect(checkExpr('sum by (le) (rate(tobira_cloud_dispatch_lag_seconds_bucket[5m]))', metrics).problems).toEqual([]);
      expect(checkExpr('tobira_gateway_lease_remaining_seconds', metrics).problems).toEqual([]);
      expect(checkExpr('tobira_cloud_outbox_depth_count', metrics).problems).toEqual(['tobira_cloud_outbox_depth_count is not exported']);
      const dash = {
        title: 't',
        uid: 'u',
        panels: [
          {
            id: 1,
            type: 'timeseries',
            title: 'p',
            gridPos: { h: 1, w: 12, x: 0, y: 0 },
            targets: [{ refId: 'A', expr: 'rate(tobira_cloud_uplink_total[5m])' }],
          },
        ],
      };
      expect(checkDashboard(dash, metrics)).toEqual(['p: tobira_cloud_uplink_total is not exported']);
    });
  });
});
