import type { Config } from '../config';
import { sandboxLimits } from './limits';
import { remoteSandbox } from './remote';
import { SandboxError, type Availability, type Sandbox } from './sandbox';

/**
 * Which sandbox a gateway has, for both runtimes' deps: its own (Node's local one, when the host
 * has bubblewrap and Python), else the one served at GATEWAY_SANDBOX_URL, else none, saying how to
 * get one (docs/sandbox.md).
 */
export function configuredSandbox(
  config: Config,
  local: Sandbox | null,
  options: { fetch?: typeof fetch; missing: string } = { missing: 'no local sandbox' },
): Sandbox {
  if (local) return local;
  const url = config.GATEWAY_SANDBOX_URL;
  if (url === undefined) {
    return unavailableSandbox(`${options.missing}, and GATEWAY_SANDBOX_URL is not set`);
  }
  const secret = config.GATEWAY_SANDBOX_SECRET;
  if (secret === undefined) return unavailableSandbox('GATEWAY_SANDBOX_URL is set without GATEWAY_SANDBOX_SECRET');
  const limits = sandboxLimits(config);
  return withKeptAvailability(
    remoteSandbox({
      url,
      secret,
      fileBytes: limits.fileBytes,
      logBytes: limits.logBytes,
      timeoutMs: limits.timeoutMs,
      fetch: options.fetch,
    }),
  );
}

/** A gateway without a sandbox: runs that would use code_interpreter are refused, saying `reason`. */
export function unavailableSandbox(reason: string): Sandbox {
  const availability: Availability = { available: false, reason };
  return {
    availability: () => Promise.resolve(availability),
    open: () => Promise.reject(new SandboxError('unavailable', reason)),
    close: () => Promise.resolve(),
  };
}

/** How long a remote sandbox's answer to "available?" is kept: every run with code_interpreter asks. */
const AVAILABLE_MS = 30_000;
const UNAVAILABLE_MS = 5_000;

/**
 * A remote sandbox whose availability is asked of its server at most once in a while, not on every
 * run and every /health: an unreachable server is asked again sooner than a reachable one.
 */
function withKeptAvailability(sandbox: Sandbox, now: () => number = Date.now): Sandbox {
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
