import type { Config } from '../../config';
import { ApiError } from '../../errors';

/**
 * Per-workspace budgets on the control plane: no tenant can grow the rows that every request of
 * its workspace reads (policies), or the gateway's storage, without bound. Each cap is checked in
 * the statement that writes (`insertWhere`, db/client.ts): SQLite runs a statement as one write transaction and
 * writers take turns, so any number of concurrent creates at the cap admit exactly the cap.
 */

export interface WorkspaceCaps {
  policies: number;
  policyConditions: number;
  policyBytes: number;
  virtualKeys: number;
  assistants: number;
}

export function workspaceCaps(config: Config): WorkspaceCaps {
  return {
    policies: config.GATEWAY_MAX_POLICIES_PER_WORKSPACE,
    policyConditions: config.GATEWAY_MAX_POLICY_CONDITIONS,
    policyBytes: config.GATEWAY_MAX_POLICY_BYTES_PER_WORKSPACE,
    virtualKeys: config.GATEWAY_MAX_VIRTUAL_KEYS_PER_WORKSPACE,
    assistants: config.GATEWAY_MAX_ASSISTANTS_PER_WORKSPACE,
  };
}

/** The 400 for a spent budget: which cap, and how much of it is used. */
export function quotaExceeded(message: string, param: string | null = null): ApiError {
  return new ApiError('quota_exceeded', message, { param });
}

/** UTF-8 bytes of a string: what SQLite's length(CAST(x AS BLOB)) counts. */
export function utf8Bytes(text: string): number {
  return new TextEncoder().encode(text).length;
}
