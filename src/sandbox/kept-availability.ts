import type { Availability, Sandbox } from './sandbox';

/** How long an answer to "available?" is kept: every run with code_interpreter and every /health asks. */
const AVAILABLE_MS = 30_000;
const UNAVAILABLE_MS = 5_000;

/**
 * `sandbox` whose availability is asked at most once in a while, not on every run and every
 * /health: a remote one's is a request to its server (the local one keeps its own check). One that
 * is not available is asked again sooner than one that is.
 */
export function withKeptAvailability(sandbox: Sandbox, now: () => number = Date.now): Sandbox {
  let kept: { answer: Promise<Availability>; until: number } | null = null;
  return {
    availability() {
      const at = now();
      if (kept && at < kept.until) return kept.answer;
      const answer = sandbox.availability();
      const entry = { answer, until: at + UNAVAILABLE_MS };
      kept = entry;
      void answer.then((found) => {
        if (found.available) entry.until = now() + AVAILABLE_MS;
      });
      return answer;
    },
    open: (key) => sandbox.open(key),
    close: () => sandbox.close(),
  };
}
