import { EventLoopSlices } from '../lib/slices';

/**
 * The slices of a Node process's one event loop (lib/slices.ts), shared by the runs it executes
 * (through Deps.slices). A slice ends with a 0 ms timer.
 *
 * Known limit: on Node 20, when a timer's work runs past the next timer's due time and reads the
 * clock (as any setTimeout does), libuv runs the timers again at once, without polling, for as long
 * as that goes on, so slices that keep their waiters busy run back to back while no request is
 * read. Ending them in the check phase instead (setImmediate, after the poll phase) served the
 * waiting requests (120 echoes in a second of sliced work, against one) and held the hostile
 * suite's framing case under 42 ms, but the suite's H2 then peaked now and then at 150 to 500 MB
 * over idle instead of under 115 (6 of about 60 runs; never in 24 with timers), for a reason not
 * found yet. Until it is, memory wins: see docs/development.md.
 */
export const nodeSlices = new EventLoopSlices({ later: (end) => setTimeout(end, 0) });
