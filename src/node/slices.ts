import { EventLoopSlices } from '../lib/slices';

/**
 * The slices of a Node process's one event loop (lib/slices.ts), shared by the runs it executes
 * (through Deps.slices). A slice ends in the check phase (setImmediate), right after the poll
 * phase: between two slices the event loop reads what is waiting (another tenant's request, a
 * health check).
 *
 * Not a 0 ms timer, as before: on Node 20, when a timer's work runs past the next timer's due time
 * and reads the clock (as any setTimeout does), libuv runs the timers again at once, without
 * polling, for as long as that goes on, so slices whose waiters kept them busy ran back to back
 * while no request was read. The hostile suite's framing case then held a `/health` up to 25 to
 * 64 ms (2 of 11 runs over the suite's 50 ms), against 16 to 26 ms ended here (2026-11-27). The
 * check phase had been tried before and taken back: H2's peak memory then went now and then to
 * 150 to 500 MB over idle (6 of about 60 runs). On today's code it did not, in 29 runs (84 to
 * 103 MB over idle, against 84 to 106 with timers in 27): see docs/development.md.
 */
export const nodeSlices = new EventLoopSlices({ later: (end) => setImmediate(end) });
