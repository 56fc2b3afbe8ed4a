import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { KEY_NOOPS, KEY_TRANSITIONS } from '../src/domain/key-states.js';
import { OUTBOX_TRANSITIONS } from '../src/adapters/outbox/states.js';
import { PAYMENT_NOOPS, PAYMENT_TRANSITIONS, REFUND_TRANSITIONS, STAY_NOOPS, STAY_TRANSITIONS } from '../src/domain/stay-states.js';
import { STATUS_GUARDS, VALUE_GUARDS } from '../src/domain/verb-guards.js';
import { MEMBERSHIP_NOOPS, MEMBERSHIP_TRANSITIONS } from '../src/domain/membership-states.js';
import { SIGNING_KEY_TRANSITIONS } from '../src/domain/signing-keys.js';
import { MODE_REQUEST_TRANSITIONS } from '../src/domain/mode-requests.js';
import { WALK_IN_NOOPS, WALK_IN_TRANSITIONS } from '../src/domain/walk-ins.js';
import { UPLINK_KEY_ROTATION_TRANSITIONS } from '../src/domain/uplink-keys.js';

const doc = readFileSync(new URL('../../docs/state-machines.md', import.meta.url), 'utf8');

/** The rows of the first markdown table after `heading`, as arrays of trimmed cells. */
function tableAfter(heading: string): string[][] {
  const start = doc.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`heading ${heading} not found`);
  const lines = doc.slice(start).split('\n');
  const first = lines.findIndex((l) => l.startsWith('|'));
  const rows: string[][] = [];
  for (const l of lines.slice(first + 2)) {
    if (!l.startsWith('|')) break;
    rows.push(
      l
        .split('|')
        .slice(1, -1)
        .map((c) => c.trim()),
    );
  }
  return rows;
}

const states = (cell: string) =>
  cell
    .split(',')
    .map((s) => s.trim().replace(/`/g, ''))
    .map((s) => (s === '—' ? null : s));
const code = (cell: string) => cell.replace(/`/g, '');

describe('docs/state-machines.md', () => {
  it('lists exactly the entry-key transitions of the code table', () => {
    const fromDoc = tableAfter('### Transitions').flatMap(([from = '', event = '', to = '', c = '']) =>
      states(from).map((f) => `${f} --${event}--> ${to.replace(/`/g, '')} ${code(c)}`),
    );
    const fromCode = KEY_TRANSITIONS.flatMap((r) => r.from.map((f) => `${f} --${r.event}--> ${r.to} ${r.code}`));
    expect(fromDoc.sort()).toEqual(fromCode.sort());
    expect(fromDoc.length).toBeGreaterThan(5);
  });

  it('lists exactly the entry-key no-ops of the code table', () => {
    const fromDoc = tableAfter('### No-ops').flatMap(([from = '', event = '', c = '']) =>
      states(from).map((f) => `${f} --${event}--> noop ${code(c)}`),
    );
    const fromCode = KEY_NOOPS.flatMap((r) => r.from.map((f) => `${f} --${r.event}--> noop ${r.code}`));
    expect(fromDoc.sort()).toEqual(fromCode.sort());
    expect(fromDoc.length).toBeGreaterThan(3);
  });

  it('lists exactly the outbox transitions of the code table', () => {
    const fromDoc = tableAfter('### Outbox transitions').map(([from = '', event = '', to = '', by = '']) =>
      [code(from), event, code(to), code(by)].join(' | '),
    );
    const fromCode = OUTBOX_TRANSITIONS.map((r) => [r.from, r.event, r.to, r.by].join(' | '));
    expect(fromDoc).toEqual(fromCode);
  });

  it('lists exactly the cloud signing key transitions of the code table', () => {
    const fromDoc = tableAfter('### Signing key transitions').map(([from = '', step = '', to = '', c = '']) =>
      [code(from), step, code(to), code(c)].join(' | '),
    );
    expect(fromDoc).toEqual(SIGNING_KEY_TRANSITIONS.map((r) => [r.from, r.step, r.to, r.code].join(' | ')));
  });

  it.each([
    ['stay', '### Stay transitions', '### Stay no-ops', STAY_TRANSITIONS, STAY_NOOPS],
    ['payment', '### Payment transitions', '### Payment no-ops', PAYMENT_TRANSITIONS, PAYMENT_NOOPS],
    ['membership', '### Membership transitions', '### Membership no-ops', MEMBERSHIP_TRANSITIONS, MEMBERSHIP_NOOPS],
  ] as const)('lists exactly the %s transitions and no-ops of the code tables', (_name, tHeading, nHeading, transitions, noops) => {
    const tDoc = tableAfter(tHeading).flatMap(([from = '', event = '', to = '', c = '']) =>
      states(from).map((f) => `${f} --${event}--> ${to.replace(/`/g, '')} ${code(c)}`),
    );
    const tCode = transitions.flatMap((r) => r.from.map((f) => `${f} --${r.event}--> ${r.to} ${r.code}`));
    expect(tDoc.sort()).toEqual(tCode.sort());
    expect(tDoc.length).toBeGreaterThan(6);
    const nDoc = tableAfter(nHeading).flatMap(([from = '', event = '', c = '']) =>
      states(from).map((f) => `${f} --${event}--> noop ${code(c)}`),
    );
    const nCode = noops.flatMap((r) => r.from.map((f) => `${f} --${r.event}--> noop ${r.code}`));
    expect(nDoc.sort()).toEqual(nCode.sort());
    expect(nDoc.length).toBeGreaterThan(6);
  });

  it('lists exactly the gateway uplink-key rotation transitions of the code table', () => {
    const fromDoc = tableAfter('### Uplink-key rotation transitions').map(([from = '', event = '', to = '', c = '']) =>
      [code(from), event, code(to), code(c)].join(' | '),
    );
    expect(fromDoc).toEqual(UPLINK_KEY_ROTATION_TRANSITIONS.map((r) => [r.from, r.event, r.to, r.code].join(' | ')));
    expect(fromDoc.length).toBe(5);
  });

  it('lists exactly the walk-in transitions and no-ops of the code tables', () => {
    const tDoc = tableAfter('### Walk-in transitions').flatMap(([from = '', event = '', to = '', c = '']) =>
      states(from).map((f) => `${f} --${event}--> ${to.replace(/`/g, '')} ${code(c)}`),
    );
    const tCode = WALK_IN_TRANSITIONS.flatMap((r) => r.from.map((f) => `${f} --${r.event}--> ${r.to} ${r.code}`));
    expect(tDoc.sort()).toEqual(tCode.sort());
    expect(tDoc.length).toBe(6);
    const nDoc = tableAfter('### Walk-in no-ops').flatMap(([from = '', event = '', c = '']) =>
      states(from).map((f) => `${f} --${event}--> noop ${code(c)}`),
    );
    const nCode = WALK_IN_NOOPS.flatMap((r) => r.from.map((f) => `${f} --${r.event}--> noop ${r.code}`));
    expect(nDoc.sort()).toEqual(nCode.sort());
    expect(nDoc.length).toBeGreaterThan(6);
  });

  it('lists exactly the mode request transitions of the code table', () => {
    const fromDoc = tableAfter('### Mode request transitions').map(([from = '', event = '', to = '', verb = '']) =>
      [states(from)[0] ?? null, event, code(to), code(verb)].join(' | '),
    );
    expect(fromDoc).toEqual(MODE_REQUEST_TRANSITIONS.map((r) => [r.from, r.event, r.to, r.verb].join(' | ')));
    expect(fromDoc.length).toBe(4);
  });

  it('lists exactly the refund transitions of the code table', () => {
    const fromDoc = tableAfter('### Refund transitions').flatMap(([from = '', event = '', to = '']) =>
      states(from).map((f) => `${f} --${event}--> ${code(to)}`),
    );
    expect(fromDoc.sort()).toEqual(REFUND_TRANSITIONS.flatMap((r) => r.from.map((f) => `${f} --${r.event}--> ${r.to}`)).sort());
  });

  it('lists exactly the verbs of every guarded status column and every guarded money column and flag', () => {
    const verbs = (cell: string) =>
      cell === '—'
        ? []
        : cell
            .split(',')
            .map((v) => code(v.trim()))
            .sort();
    const row = ([column = '', cell = '']: string[]) => `${code(column)}: ${verbs(cell).join(' ')}`;
    expect(tableAfter('### Guarded status columns').map(row)).toEqual(
      STATUS_GUARDS.map((g) => `${g.table}.${g.column}: ${[...new Set(g.moves.map((m) => m.verb))].sort().join(' ')}`),
    );
    expect(tableAfter('### Guarded money columns and flags').map(row)).toEqual(
      VALUE_GUARDS.map((g) => `${g.table}.${g.column}: ${[...g.verbs].sort().join(' ')}`),
    );
  });
});
