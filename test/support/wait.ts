/**
 * Waiting for a condition, never for a time: `read` is looked at every POLL_MS until `done` holds
 * for what it answered, or `timeoutMs` passes; answers the last value read either way, for the
 * test's own expectation to judge.
 */
const POLL_MS = 20;

export async function waitFor<T>(read: () => T | Promise<T>, done: (value: T) => boolean, timeoutMs = 20_000): Promise<T> {
  for (const deadline = Date.now() + timeoutMs; ; ) {
    const value = await read();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}
