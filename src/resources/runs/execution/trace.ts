import type { ProviderAttempt, RunTrace } from '../../../db/json-columns';
import type { RunRow } from '../../../db/schema';
import type { ProviderCallOutcome, ProviderCallTimer } from '../../../metrics/gateway';

/**
 * A run's trace (runs.trace): the provider attempts its execution made and the note of its log
 * line, kept with the run by the statement that ends its turn (engine.ts) or settles it
 * (settle.ts), and read back by GET /v1/runs/{run_id}/trace and the run's log line. Bounded
 * whatever the provider or the tenant does: the last MAX_TRACE_ATTEMPTS attempts, each text cut.
 */

/** Attempts kept per run: the last ones (a run's later turns and file search rounds call again). */
export const MAX_TRACE_ATTEMPTS = 16;
/** Characters kept of a slug, a model or a cause. */
export const MAX_TRACE_TEXT = 128;

const bounded = (text: string) => (text.length > MAX_TRACE_TEXT ? text.slice(0, MAX_TRACE_TEXT) : text);

/** What the execution knew of the run's end, for its log line. */
export interface TraceEnd {
  /** The slug of the virtual key that answered last (otherwise, the run's own is read). */
  virtualKey?: string | null;
  firstTokenMs?: number | null;
  cause?: string | null;
}

/** The attempts of a run's execution, from those its earlier turns kept. */
export class TraceRecorder {
  readonly #attempts: ProviderAttempt[];
  #total: number;
  readonly #now: () => number;

  constructor(previous: RunTrace | null, now: () => number) {
    this.#attempts = [...(previous?.attempts ?? [])];
    this.#total = previous?.attempts_total ?? this.#attempts.length;
    this.#now = now;
  }

  /**
   * An attempt begins with the key `virtualKey` for `model`. The call reports its first byte and
   * its end to the timer the answer makes of `inner` (the metrics' timer, still told everything).
   */
  begin(virtualKey: string, model: string): TracedAttempt {
    const record: ProviderAttempt = {
      at_ms: this.#now(),
      virtual_key: bounded(virtualKey),
      model: bounded(model),
      outcome: null,
      status: null,
      first_byte_ms: null,
      duration_ms: null,
    };
    this.#attempts.push(record);
    if (this.#attempts.length > MAX_TRACE_ATTEMPTS) this.#attempts.shift();
    this.#total++;
    return new TracedAttempt(record, this.#now);
  }

  /** The trace as it is to be written now, with `end`'s note. */
  snapshot(end: TraceEnd = {}): RunTrace {
    return {
      virtual_key: end.virtualKey ? bounded(end.virtualKey) : null,
      time_to_first_token_ms: end.firstTokenMs ?? null,
      cause: end.cause ? bounded(end.cause) : null,
      attempts: this.#attempts.map((attempt) => ({ ...attempt })),
      attempts_total: this.#total,
    };
  }
}

/** One attempt being made: its first byte, status and end, written into its record. */
export class TracedAttempt {
  readonly #record: ProviderAttempt;
  readonly #now: () => number;

  constructor(record: ProviderAttempt, now: () => number) {
    this.#record = record;
    this.#now = now;
  }

  /** The provider's HTTP status, once its answer began (or refused). */
  status(status: number): void {
    this.#record.status = status;
  }

  /** A call timer that records into the attempt and tells `inner` (the metrics') the same. */
  timer(inner?: () => ProviderCallTimer): () => ProviderCallTimer {
    const record = this.#record;
    return () => {
      const timer = inner?.();
      return {
        firstByte: () => {
          record.first_byte_ms ??= this.#now() - record.at_ms;
          timer?.firstByte();
        },
        end: (outcome: ProviderCallOutcome) => {
          if (record.outcome === null) {
            record.outcome = outcome;
            record.duration_ms = this.#now() - record.at_ms;
          }
          timer?.end(outcome);
        },
      };
    };
  }
}

/**
 * The trace of a run settled by someone other than its execution (a cancel, the recovery sweep):
 * the attempts its earlier turns kept and its key as they left it; no first token of its own (the
 * settlement adds its cause: executor-writes.ts).
 */
export const settledTrace = (run: Pick<RunRow, 'trace'>, now: () => number): RunTrace =>
  new TraceRecorder(run.trace, now).snapshot({ virtualKey: run.trace?.virtual_key });

/** When a run ended, or null while it has not. An expired run keeps no time of its own: it expired when its expiry passed. */
export function runEndedAt(run: RunRow): number | null {
  return run.completedAt ?? run.failedAt ?? run.cancelledAt ?? (run.status === 'expired' ? run.expiresAt : null);
}

/**
 * The fields of a run's "run ended" log line (settle.ts), as GET /v1/runs/{run_id}/trace answers
 * them too: who ran what on which key and model, its tokens, how long it took and, when it
 * failed, why. `virtualKey`: the slug of the key that answered, or the run's own.
 */
export function runEndFields(run: RunRow, virtualKey: string | null, now: number) {
  const endedAt = runEndedAt(run) ?? now;
  return {
    run_id: run.id,
    thread_id: run.threadId,
    assistant_id: run.assistantId,
    workspace_id: run.workspaceId,
    api_key_id: run.apiKeyId,
    virtual_key: virtualKey,
    model: run.model,
    status: run.status,
    prompt_tokens: run.usage?.prompt_tokens ?? 0,
    completion_tokens: run.usage?.completion_tokens ?? 0,
    total_tokens: run.usage?.total_tokens ?? 0,
    time_to_first_token_ms: run.trace?.time_to_first_token_ms ?? null,
    duration_ms: endedAt - run.createdAt,
    ...(run.incompleteDetails ? { incomplete_reason: run.incompleteDetails.reason } : {}),
    ...(run.lastError
      ? {
          cause: run.trace?.cause ?? run.lastError.code,
          error_code: run.lastError.code,
          error_message: run.lastError.message,
        }
      : {}),
  };
}
