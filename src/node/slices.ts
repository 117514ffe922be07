import { EventLoopSlices } from '../lib/slices';

/**
 * The slices of a Node process's one event loop (lib/slices.ts), shared by the runs it executes
 * (through Deps.slices). A slice ends in the check phase (setImmediate), right after the poll
 * phase has served the I/O that was waiting. Not with a 0 ms timer: on Node 20, when a timer's
 * work runs past the next timer's due time and reads the clock (as any setTimeout does), libuv
 * runs the timers again at once, without polling, for as long as that goes on; slices ended by
 * timers ran back to back while no request was read (one echo served in a second of sliced work,
 * against 120 with setImmediate).
 */
export const nodeSlices = new EventLoopSlices({ later: (end) => setImmediate(end) });
