#!/usr/bin/env node
// `tobira-gateway [--config <file>]`: runs the TypeScript entry through tsx (no build step).
import { register } from 'tsx/esm/api';

register();
await import('../src/main.ts');
