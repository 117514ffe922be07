import type { PolicyUnit } from '../db/schema';

/** The length of each unit's window. Each divides a day, so windows align to UTC boundaries. */
export const WINDOW_MS: Record<PolicyUnit, number> = { rpm: 60_000, rph: 3_600_000, rpd: 86_400_000 };

export const UNIT_NAMES: Record<PolicyUnit, string> = { rpm: 'minute', rph: 'hour', rpd: 'day' };

/** The fixed window holding `now`: the UTC minute, hour or day (ms since the epoch, end excluded). */
export function windowOf(unit: PolicyUnit, now: number): { start: number; end: number } {
  const size = WINDOW_MS[unit];
  const start = Math.floor(now / size) * size;
  return { start, end: start + size };
}

/** Whole seconds until `end`, rounded up and at least 1: Retry-After and the RateLimit `t`. */
export function secondsUntil(end: number, now: number): number {
  return Math.max(1, Math.ceil((end - now) / 1000));
}
