import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * Gives memory back once a burst is over. V8 keeps the heap a burst grew (its young generation at
 * its largest, the old one with the garbage the last collection left) for as long as the process
 * stays idle: it decides to shrink only when it collects, and it collects only when something
 * allocates. After a burst of runs, an idle gateway stays at about 200 MB, against 150 MB before
 * the burst.
 *
 * Start-up is such a burst: the modules' objects and the migrations grow the young generation to
 * its largest before the first request, and leave garbage (the Node gateway starts the watch with
 * `firstBaselineBytes: 0`, and an idle gateway's RSS falls by about 10 MB).
 *
 * So once no request has arrived, none has been answered and no background task has run for
 * `idleMs`, and the heap has grown by `growthBytes` since the last trim, this collects garbage
 * twice:
 *
 * - at once, which frees the old generation's garbage;
 * - `settleMs` later, still idle, which returns the freed pages and shrinks the young generation.
 *   V8 shrinks it only when it sees a low allocation rate, and it estimates the rate from what
 *   was allocated since its last collections, over at least 5 s: an earlier second collection
 *   would still count the burst's last allocations and leave the young generation as it is.
 *
 * Each collection holds the event loop for about 25 ms with a heap of 100 MB, which is why they
 * wait for quiet; a request that arrives in between ends the trim, work in flight only delays it.
 */

export interface MemoryTrimOptions {
  /** Moves when a request arrives (a count of requests). */
  activity: () => number;
  /**
   * True while work is in flight: an answer still being written (a download read slowly, an event
   * stream: a collection would hold it up 25 to 150 ms), or background work (a run without its
   * client, an ingestion, a sweep). No collection is made meanwhile; unlike a request, it neither
   * restarts the count of quiet looks nor ends a trim under way, which go on once it is over.
   */
  busy: () => boolean;
  /** Called after each trim, with the heap's committed size before and after. */
  trimmed?: (report: TrimReport) => void;
  /** How often activity is looked at. */
  checkMs?: number;
  idleMs?: number;
  settleMs?: number;
  growthBytes?: number;
  /**
   * What the heap's growth is counted from until the first trim (by default its size when the
   * watch starts). 0 makes the first quiet trim whatever the heap's size: what a process's
   * start-up left (its modules' garbage, the young generation it grew) counts as a burst.
   */
  firstBaselineBytes?: number;
}

export interface TrimReport {
  heapBytesBefore: number;
  heapBytesAfter: number;
  collections: number;
}

/** Starts watching for idleness; answers a function that stops it. A no-op without V8's `gc`. */
export function trimMemoryWhenIdle(options: MemoryTrimOptions): () => void {
  const collect = exposeGc();
  if (!collect) return () => undefined;
  const checkMs = options.checkMs ?? 1_000;
  const idleChecks = Math.max(1, Math.round((options.idleMs ?? 2_000) / checkMs));
  const settleChecks = Math.max(1, Math.round((options.settleMs ?? 6_000) / checkMs));
  const growthBytes = options.growthBytes ?? 16 * 1024 * 1024;

  /** The heap's size after the last whole trim (both collections), which growth is counted from. */
  let baseline = options.firstBaselineBytes ?? heapBytes();
  let lastActivity = options.activity();
  let quietChecks = 0;
  /** The trim under way, and the quiet look at which its second collection is due. */
  let trim: { report: TrimReport; secondAt: number } | null = null;

  const timer = setInterval(() => {
    const activity = options.activity();
    if (activity !== lastActivity) {
      lastActivity = activity;
      quietChecks = 0;
      if (trim) finish(trim.report);
      return;
    }
    // Work in flight holds the collections back without ending the quiet: the periodic sweeps
    // (every 15 s, a few ms each) would otherwise cut most trims after their first collection.
    if (options.busy()) return;
    quietChecks++;
    if (trim) {
      if (quietChecks < trim.secondAt) return;
      trim.report.collections++;
      collect();
      finish(trim.report);
    } else if (quietChecks >= idleChecks) {
      const heap = heapBytes();
      if (heap < baseline + growthBytes) return;
      trim = {
        report: { heapBytesBefore: heap, heapBytesAfter: 0, collections: 1 },
        secondAt: quietChecks + settleChecks,
      };
      collect();
    }
  }, checkMs);
  timer.unref();

  function finish(report: TrimReport) {
    report.heapBytesAfter = heapBytes();
    // A trim that a request cut after its first collection has not shrunk the young generation
    // (16 MB of a heap of 40): counted from there, the next burst had to grow the heap by
    // growthBytes more before any trim, and a gateway whose start-up trim was cut by its first
    // requests never gave back what a burst grew. Its growth still counts from the last whole trim.
    if (report.collections === 2) baseline = report.heapBytesAfter;
    trim = null;
    options.trimmed?.(report);
  }
  return () => clearInterval(timer);
}

/** The heap's committed size, every space. */
function heapBytes(): number {
  return getHeapStatistics().total_heap_size;
}

/**
 * V8's `gc()`, which Node exposes only to a process started with --expose-gc: the flag is set
 * for the one context made here to hand it over, and unset again, so no other context (a worker
 * thread's) gets it.
 */
function exposeGc(): (() => void) | null {
  const exposed: unknown = Reflect.get(globalThis, 'gc');
  if (typeof exposed === 'function') return () => void exposed();
  setFlagsFromString('--expose-gc');
  try {
    const gc: unknown = runInNewContext('gc');
    return typeof gc === 'function' ? () => void gc() : null;
  } finally {
    setFlagsFromString('--no-expose-gc');
  }
}
