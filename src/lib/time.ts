/** The database keeps milliseconds; Assistants objects speak Unix seconds. */
export const toUnixSeconds = (ms: number): number => Math.floor(ms / 1000);

/**
 * A timeout on someone else's silence (an upstream's, a streaming client's): `fire` runs once `ms`
 * have passed and a turn of the event loop after that. Timers run before a turn's I/O, so when
 * this process was held past `ms` (a long turn, a machine short of CPU), what the other side sent
 * meanwhile is still unread when the first timer fires; the second comes after that I/O, so only
 * the other side's own silence fires it. Answers a function that cancels it.
 */
export function silenceTimeout(fire: () => void, ms: number): () => void {
  let timer = setTimeout(() => (timer = setTimeout(fire, 0)), ms);
  return () => clearTimeout(timer);
}
