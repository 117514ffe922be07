/** A run's statuses, OpenAI's nine (db/run-statuses.ts has the sets the code decides by). */
export const RUN_STATUSES = [
  'queued',
  'in_progress',
  'requires_action',
  'cancelling',
  'cancelled',
  'failed',
  'completed',
  'incomplete',
  'expired',
] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];
