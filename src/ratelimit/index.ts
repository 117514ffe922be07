/**
 * Rate limiting: what the run use-cases (resources/runs/commands.ts) and the runtimes use. See the README's
 * "Rate limiting" for the semantics and enforce.ts for the two calls.
 */
export {
  attributeValues,
  METADATA_HEADER,
  parseMetadataHeader,
  requestMetadata,
  type RequestAttributes,
} from './attributes';
export type { AdmitResult, CounterAdjustment, CounterAdmission, CounterStore, Refusal } from './counter-store';
export {
  admitRequest,
  admitWithoutTokens,
  countRequest,
  giveBack,
  groupValues,
  policyCounters,
  settleTokens,
  type Admission,
  type PolicyWindowCounters,
  type TurnTokens,
} from './enforce';
export { promptChars, turnReservation } from './reservation';
export { LibsqlCounterStore } from './libsql-counter-store';
export { PolicyCache } from './policy-cache';
