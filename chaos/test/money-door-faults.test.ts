import { describe, expect, it } from 'vitest';
import { MONEY_RUN_DOOR_FAULTS, parseDoorFaults } from '../money/run.js';

describe('chaos:money --door-faults', () => {
  it('is none by default, `doors` is every door fault a money run can take, and a list is taken as given', () => {
    expect(parseDoorFaults('none')).toEqual([]);
    expect(parseDoorFaults('')).toEqual([]);
    expect(parseDoorFaults('doors')).toEqual([...MONEY_RUN_DOOR_FAULTS]);
    expect(parseDoorFaults('cut,partition')).toEqual(['cut', 'partition']);
  });

  it("refuses the cloud's kill and crash points (the money faults own the cloud), the stuck outbox and a day-ahead clock", () => {
    for (const f of ['kill-cloud', 'crash-point', 'stuck-outbox', 'clock-ahead'])
      expect(() => parseDoorFaults(`cut,${f}`)).toThrow(new RegExp(`${f}.*cannot run with money`));
    expect(() => parseDoorFaults('flood')).toThrow(/unknown fault/);
  });
});
