import { afterEach, describe, expect, it } from 'vitest';
import { onShutdownSignals } from '../src/index.js';

describe('onShutdownSignals', () => {
  let off: (() => void) | undefined;
  afterEach(() => off?.());

  it('takes the first signal as graceful, echoes of it as nothing, and a later one as forced', () => {
    let t = 0;
    const calls: string[] = [];
    off = onShutdownSignals(
      { graceful: (s) => calls.push(`graceful ${s}`), forced: (s) => calls.push(`forced ${s}`) },
      { now: () => t, duplicateWindowMs: 1000 },
    );
    process.emit('SIGINT', 'SIGINT');
    t = 50;
    process.emit('SIGINT', 'SIGINT'); // npm / tsx forwarding the same Ctrl-C
    expect(calls).toEqual(['graceful SIGINT']);
    t = 2000;
    process.emit('SIGTERM', 'SIGTERM');
    expect(calls).toEqual(['graceful SIGINT', 'forced SIGTERM']);
  });
});
