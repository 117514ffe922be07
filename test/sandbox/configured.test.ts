import { describe, expect, it } from 'vitest';
import { ConfigurationError, parseConfig } from '../../src/config';
import { configuredSandbox, noSandbox } from '../../src/sandbox/configured';
import { sandboxLimits, type SandboxLimits } from '../../src/sandbox/limits';

/** Which sandbox a configuration gives an entry: the remote one, the runtime's own, or none that says how. */

const SECRET = 'k'.repeat(32);

describe('the configured sandbox', () => {
  it('refuses GATEWAY_SANDBOX_URL without its secret, naming the variable', () => {
    expect(() => parseConfig({ GATEWAY_SANDBOX_URL: 'http://127.0.0.1:8788' })).toThrow(ConfigurationError);
    expect(() => parseConfig({ GATEWAY_SANDBOX_URL: 'http://127.0.0.1:8788' })).toThrow(/GATEWAY_SANDBOX_SECRET/);
    expect(() => parseConfig({ GATEWAY_SANDBOX_SECRET: 'short' })).toThrow(
      /GATEWAY_SANDBOX_SECRET: must be at least 32/,
    );
  });

  it('takes GATEWAY_SANDBOX_CGROUP as `off` or a cgroup path, refusing anything else by name', () => {
    expect(sandboxLimits(parseConfig({ GATEWAY_SANDBOX_CGROUP: 'off' })).cgroup).toBe('off');
    expect(sandboxLimits(parseConfig({ GATEWAY_SANDBOX_CGROUP: '/gateway/sessions' })).cgroup).toBe(
      '/gateway/sessions',
    );
    expect(sandboxLimits(parseConfig({})).cgroup).toBeUndefined();
    expect(() => parseConfig({ GATEWAY_SANDBOX_CGROUP: 'memory' })).toThrow(
      /GATEWAY_SANDBOX_CGROUP: is `off` or a cgroup path/,
    );
  });

  it('is none without a URL or a local one: unavailable, saying how to have one', async () => {
    const sandbox = configuredSandbox(parseConfig({}));
    expect(await sandbox.availability()).toEqual({
      available: false,
      reason: expect.stringContaining('GATEWAY_SANDBOX_URL'),
    });
    await expect(sandbox.open({ workspaceId: 'w', threadId: 't' })).rejects.toMatchObject({ code: 'unavailable' });
  });

  it('is the runtime’s own, with the configured limits, without a URL', () => {
    let given: SandboxLimits | undefined;
    const own = noSandbox('own');
    const sandbox = configuredSandbox(parseConfig({ GATEWAY_SANDBOX_MEMORY_MB: '512' }), (limits) => {
      given = limits;
      return own;
    });
    expect(sandbox).toBe(own);
    expect(given?.memoryBytes).toBe(512 * 1024 * 1024);
  });

  it('is the remote one when GATEWAY_SANDBOX_URL is set, even beside a local one', async () => {
    const sandbox = configuredSandbox(
      parseConfig({ GATEWAY_SANDBOX_URL: 'http://127.0.0.1:1', GATEWAY_SANDBOX_SECRET: SECRET }),
      () => noSandbox('local'),
    );
    const answer = await sandbox.availability();
    expect(answer).toEqual({
      available: false,
      reason: expect.stringContaining('http://127.0.0.1:1 cannot be reached'),
    });
    expect(JSON.stringify(answer)).not.toContain(SECRET);
  });
});
