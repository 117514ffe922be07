// Stands in for @types/node in the Worker's type check (../../tsconfig.json): some libraries'
// types reference Node's (`/// <reference types="node" />`) without using them, which would
// declare Node's globals (setImmediate, Buffer, process) for code that runs on Workers. Declares
// nothing.
export {};
