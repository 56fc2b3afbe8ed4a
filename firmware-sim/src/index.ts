export * from './adapter.js';
export * from './faults.js';
export * from './fleet.js';
export * from './lock.js';
