import { EventLoopSlices } from '../lib/slices';

/**
 * The slices of a Node process's one event loop (lib/slices.ts), shared by the runs it executes
 * (through Deps.slices).
 */
export const nodeSlices = new EventLoopSlices();
