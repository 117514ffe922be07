import { EventLoopSlices } from './lib/slices';

/**
 * The slices of a Node process's one event loop (lib/slices.ts), shared by the runs it executes
 * (through Deps.slices) and by its embedded database's large writes.
 */
export const nodeSlices = new EventLoopSlices();
