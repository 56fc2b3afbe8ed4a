export * from './backends.js';
