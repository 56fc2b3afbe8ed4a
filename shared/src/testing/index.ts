export * from './backends.js';
export * from './mosquitto.js';
export * from './wait.js';
