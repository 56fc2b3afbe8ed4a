export * from './backends.js';
export * from './mosquitto.js';
