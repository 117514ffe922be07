/**
 * Waiting for a condition rather than for a time, runtime-neutral: the Node tests, the workerd tests
 * and the reliability suites use it. A test that sleeps for a time passes on an idle machine only.
 */

/**
 * Reads `read` every `everyMs` until `done` holds of what it answered, or `timeoutMs` pass; answers
 * the last value read, for the caller's assertion (which then fails).
 */
export async function waitFor<T>(
  read: () => T | Promise<T>,
  done: (value: T) => boolean,
  timeoutMs = 10_000,
  everyMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await sleep(everyMs);
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
