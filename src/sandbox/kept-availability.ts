import type { Availability, Sandbox } from './sandbox';

/** How long an answer to "available?" is kept: every run with code_interpreter and every /health asks. */
const AVAILABLE_MS = 30_000;
const UNAVAILABLE_MS = 5_000;

/**
 * How long a check may go unanswered before another is asked for: on Workers, a check begun for a
 * request that has ended may never settle.
 */
const ASK_MS = 15_000;

/**
 * `sandbox` whose availability is asked at most once in a while, not on every run and every
 * /health: a remote one's is a request to its server (the local one keeps its own check). One that
 * is not available is asked again sooner than one that is. Only a first question waits for an
 * answer, its own: the answer is shared, never a check under way, since on Workers a request cannot
 * wait on another's I/O (its promise may never settle once that request has ended). Once an answer
 * is known it is given at once, and when it is old, given while a new one is asked for, so that a
 * slow or unreachable sandbox server never holds up a run or /health.
 */
export function withKeptAvailability(sandbox: Sandbox, now: () => number = Date.now): Sandbox {
  let known: { answer: Availability; until: number } | null = null;
  let askedAt: number | null = null;
  const ask = (): Promise<Availability> => {
    askedAt = now();
    return sandbox
      .availability()
      .catch((): Availability => ({
        available: false,
        reason: 'The sandbox could not be asked whether it is available.',
      }))
      .then((answer) => {
        known = { answer, until: now() + (answer.available ? AVAILABLE_MS : UNAVAILABLE_MS) };
        askedAt = null;
        return answer;
      });
  };
  return {
    availability() {
      if (known === null) return ask();
      if (now() >= known.until && (askedAt === null || now() - askedAt >= ASK_MS)) void ask();
      return Promise.resolve(known.answer);
    },
    open: (key) => sandbox.open(key),
    close: () => sandbox.close(),
  };
}
