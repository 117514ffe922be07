import type { Config } from '../config';
import { sandboxLimits, type SandboxLimits } from './limits';
import { remoteSandbox } from './remote';
import { SandboxError, type Sandbox } from './sandbox';

/**
 * The sandbox the configuration names, for an entry to put in its deps: the one served at
 * GATEWAY_SANDBOX_URL when it is set; else this runtime's own (`local`: Node's bubblewrap); else
 * none, whose availability says how to have one.
 */
export function configuredSandbox(config: Config, local?: (limits: SandboxLimits) => Sandbox): Sandbox {
  const limits = sandboxLimits(config);
  if (config.GATEWAY_SANDBOX_URL !== undefined && config.GATEWAY_SANDBOX_SECRET !== undefined) {
    return remoteSandbox({
      url: config.GATEWAY_SANDBOX_URL,
      secret: config.GATEWAY_SANDBOX_SECRET,
      fileBytes: limits.fileBytes,
      logBytes: limits.logBytes,
      timeoutMs: limits.timeoutMs,
    });
  }
  if (local) return local(limits);
  return noSandbox(
    'No code sandbox: set GATEWAY_SANDBOX_URL and GATEWAY_SANDBOX_SECRET to a `gateway sandbox` server.',
  );
}

/** A sandbox that is not there, saying why. */
export function noSandbox(reason: string): Sandbox {
  return {
    availability: () => Promise.resolve({ available: false, reason }),
    open: () => Promise.reject(new SandboxError('unavailable', reason)),
    close: () => Promise.resolve(),
  };
}
