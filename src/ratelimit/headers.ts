import type { ActivePolicy } from './matching';
import { secondsUntil, WINDOW_MS } from './windows';

/**
 * Rate-limit response headers, for admitted and refused requests alike:
 * - OpenAI's `x-ratelimit-limit-<type>`, `x-ratelimit-remaining-<type>`, `x-ratelimit-reset-<type>`
 *   (type `requests` or `tokens`; the reset is a Go duration such as `1s`, `6m0s`, `12ms`);
 * - the IETF pair of draft-ietf-httpapi-ratelimit-headers (draft 11): `RateLimit-Policy:
 *   "<policy id>";q=<limit>;w=<window seconds>` and `RateLimit: "<policy id>";r=<remaining>;t=<seconds
 *   to reset>`. Both are Structured Field lists whose items must be integers and sf-strings, so the
 *   policy's id names it (a name may hold any character) and fractional limits round down. Tokens
 *   policies add `qu="tokens"`, a quota unit outside the draft's registry.
 */

/** One matching policy's counter as the decision left it. */
export interface PolicyUsage {
  policy: ActivePolicy;
  used: number;
  windowEnd: number;
}

/** Whole units left in the window: requests that still fit, or tokens before the group is refused. */
export function remaining(usage: PolicyUsage): number {
  return Math.max(0, Math.floor(usage.policy.value - usage.used));
}

/** The policy that leaves least room (then resets soonest, then by id), or undefined for none. */
export function tightest(usages: PolicyUsage[]): PolicyUsage | undefined {
  let best: PolicyUsage | undefined;
  for (const usage of usages) {
    if (!best) {
      best = usage;
      continue;
    }
    const order =
      remaining(usage) - remaining(best) ||
      usage.windowEnd - best.windowEnd ||
      compare(usage.policy.id, best.policy.id);
    if (order < 0) best = usage;
  }
  return best;
}

/**
 * The headers for `usages` (at most one per type: the x-ratelimit-* names carry the type), in the
 * order given.
 */
export function rateLimitHeaders(usages: PolicyUsage[], now: number): Record<string, string> {
  const headers: Record<string, string> = {};
  const policies: string[] = [];
  const limits: string[] = [];
  for (const usage of usages) {
    const { policy } = usage;
    const left = remaining(usage);
    headers[`x-ratelimit-limit-${policy.type}`] = String(policy.value);
    headers[`x-ratelimit-remaining-${policy.type}`] = String(left);
    headers[`x-ratelimit-reset-${policy.type}`] = goDuration(usage.windowEnd - now);
    const unit = policy.type === 'tokens' ? ';qu="tokens"' : '';
    policies.push(`"${policy.id}";q=${Math.floor(policy.value)}${unit};w=${WINDOW_MS[policy.unit] / 1000}`);
    limits.push(`"${policy.id}";r=${left};t=${secondsUntil(usage.windowEnd, now)}`);
  }
  if (policies.length > 0) {
    headers['ratelimit-policy'] = policies.join(', ');
    headers['ratelimit'] = limits.join(', ');
  }
  return headers;
}

/** A duration as Go prints one (OpenAI's reset headers): `0s`, `12ms`, `1.5s`, `6m0s`, `1h0m0s`. */
export function goDuration(ms: number): string {
  const total = Math.max(0, Math.round(ms));
  if (total === 0) return '0s';
  if (total < 1000) return `${total}ms`;
  const hours = Math.floor(total / 3_600_000);
  const minutes = Math.floor((total % 3_600_000) / 60_000);
  const seconds = Math.floor((total % 60_000) / 1000);
  const millis = total % 1000;
  const fraction = millis === 0 ? '' : `.${String(millis).padStart(3, '0').replace(/0+$/, '')}`;
  const secondsText = `${seconds}${fraction}s`;
  if (hours > 0) return `${hours}h${minutes}m${secondsText}`;
  if (minutes > 0) return `${minutes}m${secondsText}`;
  return secondsText;
}

const compare = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
