import { EventLoopSlices } from '../../lib/slices';

/**
 * The slices of a Node process's one event loop (lib/slices.ts), shared by the runs it executes
 * (through Deps.slices). A slice that work waits on ends in the check phase (setImmediate), right
 * after the poll phase: between two slices the event loop reads what is waiting (another
 * tenant's request, a health check). A slice nothing waits on, the usual case, ends with a 0 ms
 * timer.
 *
 * Not a timer for both: on Node 20, when a timer's work runs past the next timer's due time and
 * reads the clock (as any setTimeout does), libuv runs the timers again at once, without polling,
 * for as long as that goes on, so slices whose waiters kept them busy ran back to back while no
 * request was read. The hostile suite's framing case then held a `/health` up to 25 to 64 ms (2 of
 * 11 runs over the suite's 50 ms), against 16 to 26 ms with setImmediate.
 *
 * Not setImmediate for both: every turn that does any sliced work (reading an upstream's chunk)
 * starts a slice, and a pending setImmediate makes the next poll return at once instead of waiting
 * for events to gather, so the event loop turned more often for the same work: the reliability
 * suite's load test served 443 to 485 requests/s, against 527 to 601 with timers.
 *
 * Ending a slice in the check phase holds no more memory than a timer does: the hostile suite's H2
 * (eight answers cut at 4 MiB) peaks the same with either.
 */
export const nodeSlices = new EventLoopSlices({
  ends: {
    soon: (end) => {
      const timer = setTimeout(end, 0);
      return () => clearTimeout(timer);
    },
    afterIo: (end) => setImmediate(end),
  },
});
