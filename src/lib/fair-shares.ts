/**
 * Fair shares of something scarce among keys (the provider calls of a process among workspaces):
 * at most `calls` held at once in all and `callsPerKey` by one key, and at most `bytes` of weight
 * held in all and `bytesPerKey` by one key (a taker heavier than a budget is let through alone).
 *
 * Takers past a limit wait in order: a key's in the order they came; across keys, the oldest whose
 * own key has room goes first, so that a key at its limit never holds up the others, and one that
 * waits for room in all is not overtaken by those behind it. A wait ends at its deadline, with
 * the limit that kept it (ShareTimeout), or when its signal aborts, with the signal's reason.
 */

export interface ShareLimits {
  calls: number;
  callsPerKey: number;
  bytes: number;
  bytesPerKey: number;
}

/** What a taker holds until it lets go. */
export interface Share {
  /** How long it waited in line for it: 0 when there was room at once. */
  readonly waitedMs: number;
  /** Gives the bytes back (for a call: its request was sent); the call is held on. */
  sent(): void;
  /** Gives everything back; again does nothing. */
  end(): void;
}

/** A wait that reached its deadline: `limit` kept it, at `value`. */
export class ShareTimeout extends Error {
  constructor(
    readonly limit: keyof ShareLimits,
    readonly value: number,
  ) {
    super(`no share within the deadline (${limit} ${value})`);
    this.name = 'ShareTimeout';
  }
}

interface Held {
  calls: number;
  bytes: number;
}

interface KeyState extends Held {
  key: string;
  /** Its waiters in order, from `head` on; those that gave up stay until they reach the head. */
  queue: Waiter[];
  head: number;
}

interface Waiter {
  state: KeyState;
  bytes: number;
  /** Arrival order, across keys. */
  seq: number;
  /** Admitted, or gave up: out of the line either way. */
  settled: boolean;
  admit(): void;
}

export class FairShares {
  readonly #limits: ShareLimits;
  readonly #total: Held = { calls: 0, bytes: 0 };
  readonly #keys = new Map<string, KeyState>();
  /** The keys with someone in line. */
  readonly #waiting = new Set<KeyState>();
  #seq = 0;

  constructor(limits: ShareLimits) {
    this.#limits = limits;
  }

  /** What is held now, in all and by `key`: for tests and logs. */
  held(key?: string): Held {
    if (key === undefined) return { ...this.#total };
    const state = this.#keys.get(key);
    return { calls: state?.calls ?? 0, bytes: state?.bytes ?? 0 };
  }

  /** A share of `bytes` for `key`: at once when there is room and no one before it in line, else in its turn. */
  take(key: string, bytes: number, timeoutMs: number, signal?: AbortSignal): Promise<Share> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    let state = this.#keys.get(key);
    if (state === undefined) {
      state = { key, calls: 0, bytes: 0, queue: [], head: 0 };
      this.#keys.set(key, state);
    }
    // No one in line, the usual case: nothing to wait for or to overtake.
    if (this.#waiting.size === 0 && this.#fitsKey(state, bytes) && this.#fitsTotal(bytes))
      return Promise.resolve(this.#grant(state, bytes, 0));
    const taken = state;
    const since = Date.now();
    return new Promise<Share>((resolve, reject) => {
      let stopTimer = () => {};
      const giveUp = (error: unknown) => {
        if (waiter.settled) return;
        waiter.settled = true;
        stopTimer();
        signal?.removeEventListener('abort', onAbort);
        reject(error);
        // It may have been the one that those behind it could not overtake.
        this.#pump();
      };
      const onAbort = () => giveUp(signal?.reason);
      const waiter: Waiter = {
        state: taken,
        bytes,
        seq: this.#seq++,
        settled: false,
        admit: () => {
          waiter.settled = true;
          stopTimer();
          signal?.removeEventListener('abort', onAbort);
          resolve(this.#grant(waiter.state, bytes, Date.now() - since));
        },
      };
      taken.queue.push(waiter);
      this.#waiting.add(taken);
      this.#pump();
      if (waiter.settled) return;
      const timer = setTimeout(
        () => {
          const [limit, value] = this.#keeping(waiter);
          giveUp(new ShareTimeout(limit, value));
        },
        Math.max(0, timeoutMs),
      );
      stopTimer = () => clearTimeout(timer);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  #grant(state: KeyState, bytes: number, waitedMs: number): Share {
    state.calls++;
    state.bytes += bytes;
    this.#total.calls++;
    this.#total.bytes += bytes;
    let sent = false;
    let ended = false;
    const share: Share = {
      waitedMs,
      sent: () => {
        if (sent) return;
        sent = true;
        state.bytes -= bytes;
        this.#total.bytes -= bytes;
        this.#pump();
      },
      end: () => {
        if (ended) return;
        ended = true;
        share.sent();
        state.calls--;
        this.#total.calls--;
        this.#forgetIfIdle(state);
        this.#pump();
      },
    };
    return share;
  }

  /** Admits, oldest first, those whose key has room, while there is room in all. */
  #pump(): void {
    for (;;) {
      let next: Waiter | undefined;
      for (const state of this.#waiting) {
        const head = this.#headOf(state);
        if (head !== undefined && this.#fitsKey(state, head.bytes) && (next === undefined || head.seq < next.seq))
          next = head;
      }
      if (next === undefined || !this.#fitsTotal(next.bytes)) return;
      next.state.head++;
      next.admit();
    }
  }

  /** The first waiter of `state` still in line, those that gave up dropped; none: the key leaves the waiting. */
  #headOf(state: KeyState): Waiter | undefined {
    while (state.queue[state.head]?.settled) state.head++;
    if (state.head < state.queue.length) {
      // Drops what was passed once it is most of the array.
      if (state.head > 1024 && state.head * 2 > state.queue.length) {
        state.queue = state.queue.slice(state.head);
        state.head = 0;
      }
      return state.queue[state.head];
    }
    state.queue = [];
    state.head = 0;
    this.#waiting.delete(state);
    this.#forgetIfIdle(state);
    return undefined;
  }

  #fitsKey(state: Held, bytes: number): boolean {
    return (
      state.calls < this.#limits.callsPerKey && (state.bytes === 0 || state.bytes + bytes <= this.#limits.bytesPerKey)
    );
  }

  #fitsTotal(bytes: number): boolean {
    return (
      this.#total.calls < this.#limits.calls &&
      (this.#total.bytes === 0 || this.#total.bytes + bytes <= this.#limits.bytes)
    );
  }

  /** The limit that keeps `waiter` in line: its key's head's (it waits behind it), else the overall one. */
  #keeping(waiter: Waiter): [keyof ShareLimits, number] {
    const state = waiter.state;
    const head = this.#headOf(state) ?? waiter;
    const limits = this.#limits;
    if (state.calls >= limits.callsPerKey) return ['callsPerKey', limits.callsPerKey];
    if (!this.#fitsKey(state, head.bytes)) return ['bytesPerKey', limits.bytesPerKey];
    if (this.#total.calls >= limits.calls) return ['calls', limits.calls];
    return ['bytes', limits.bytes];
  }

  #forgetIfIdle(state: KeyState): void {
    if (state.calls === 0 && state.bytes === 0 && !this.#waiting.has(state)) this.#keys.delete(state.key);
  }
}
