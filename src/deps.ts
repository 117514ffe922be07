import type { Context } from 'hono';
import type { Config } from './config';
import type { Db } from './db/client';
import type { SecretBox } from './lib/secrets';
import type { Slices } from './lib/slices';
import type { Logger } from './logger';
import type { CounterStore } from './ratelimit/counter-store';
import type { PolicyCache } from './ratelimit/policy-cache';
import type { ExecuteOptions } from './runs/engine';
import type { AuthenticatedKey } from './services/api-keys';
import type { RunRow } from './services/runs';
import type { VirtualKey } from './services/virtual-keys';
import type { WorkspaceScope } from './services/workspaces';

/**
 * Everything runtime-specific, built once per process (node.ts) or isolate (worker.ts) and handed
 * to createApp. App code reaches these only through here, never through globals of a runtime.
 */
export interface Deps {
  db: Db;
  config: Config;
  log: Logger;
  /** Encrypts and decrypts provider secrets under GATEWAY_ENCRYPTION_KEY. */
  secrets: SecretBox;
  /** How upstream providers are called: the runtime's fetch (tests may hand in a fake's handler). */
  fetch: typeof fetch;
  /** Rate-limit counters (ratelimit/counter-store.ts): libSQL by default. */
  counters: CounterStore;
  /** The active rate-limit policies per workspace, cached and indexed for matching. */
  policyCache: PolicyCache;
  /** Milliseconds since the epoch. Tests move it to cross rate-limit windows and run expiry. */
  now: () => number;
  /**
   * Keeps `task` alive after the response is sent: `executionCtx.waitUntil` on Workers, a tracked
   * promise on Node (awaited on shutdown). The task must handle its own errors.
   */
  background: (c: Context<AppEnv>, task: Promise<unknown>) => void;
  /**
   * Executes a run put in progress whose answer has already gone out (a non-streamed run), in the
   * background: in this process on Node (node/run-host.ts); on Workers, where `waitUntil` ends
   * soon after the response, somewhere that lives as long as the run. `preloaded` spares database
   * reads when the run executes where it was created.
   */
  dispatchRun: (c: Context<AppEnv>, run: RunRow, preloaded?: ExecuteOptions['preloaded']) => void;
  /**
   * Executes a streamed run put in progress and answers its event stream, `leading` first. The
   * run does not depend on the reader: a client that disconnects leaves it executing to the end.
   * In this process on Node (node/run-host.ts); on Workers, in the run's executor object, since
   * `waitUntil` ends 30 seconds after a client disconnects.
   */
  streamRun: (
    c: Context<AppEnv>,
    run: RunRow,
    options: Pick<ExecuteOptions, 'leading' | 'preloaded'>,
  ) => Promise<ReadableStream<Uint8Array>>;
  /**
   * Stops a run just marked `cancelling` at once where it executes: in this process on Node; on
   * Workers, in its executor object (one request cannot touch I/O that another one started).
   * Elsewhere, an executor notices on its next lease renewal.
   */
  abortRun: (c: Context<AppEnv>, runId: string) => void;
  /**
   * How runs executing side by side share the event loop (lib/slices.ts): in slices on Node, where
   * one process executes every run; not at all on Workers, where each run has its executor object.
   */
  slices: Slices;
}

/** The one environment type of every Hono app, sub-app and middleware here. */
export type AppEnv = {
  Variables: {
    deps: Deps;
    requestId: string;
    /** The key of `x-gateway-api-key`, set by the auth middleware on every /v1 route. */
    apiKey: AuthenticatedKey;
    /** The workspace of a workspace-scoped route (assistants, threads, runs), set by workspace(). */
    workspace: WorkspaceScope;
    /** The live virtual key of `x-gateway-virtual-key` in that workspace, set by virtualKey(). */
    virtualKey: VirtualKey;
  };
};
