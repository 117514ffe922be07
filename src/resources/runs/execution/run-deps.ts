import type { Deps } from '../../../deps';

/** What executing a run uses of the deps. */
export type RunDeps = Pick<
  Deps,
  | 'db'
  | 'config'
  | 'log'
  | 'secrets'
  | 'fetch'
  | 'counters'
  | 'policyCache'
  | 'now'
  | 'slices'
  | 'blobs'
  | 'upstreamShares'
  | 'executions'
  | 'upstreamUrls'
  | 'responseEvents'
  | 'sandbox'
  | 'metrics'
>;
