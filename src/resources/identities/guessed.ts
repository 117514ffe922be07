import { ProvisionalSettings, type Settings } from '../../db/settings-cache';
import { ApiError } from '../../errors';

/**
 * What a request served on a guess is told: `confirmed` resolves true once the settings it started
 * on are known to be the database's, false if they are not (its `signal` is aborted then). Every
 * write the request makes (usage, counters given back or charged) waits for it, so that a guess
 * dropped counts nothing.
 */
export interface Guessing {
  confirmed: Promise<boolean>;
  signal: AbortSignal;
}

/** How a request is served: on a guess, on settings read, and what drops a guess's answer. */
export interface GuessedRequest<T> {
  /** Serves it from what is held at the settings' generation, reading nothing; null, having done nothing, when something is not held. */
  guess(settings: Settings, guessing: Guessing): Promise<T | null>;
  /** Serves it on settings known to be the database's. */
  serve(settings: Settings): Promise<T>;
  /** Ends an answer the settings did not confirm (a stream cancelled): nothing of it is sent. */
  drop(answer: T): Promise<void>;
}

/**
 * A request that calls a provider without writing first (pass-through/pipeline.ts), served on
 * settings assumed unchanged (ProvisionalSettings: the API key, the virtual key and the policies
 * as this process or isolate last saw them) while the generation is read beside the provider's
 * call (apiKeyAuth's `now` check). Nothing of the guess's answer, nor its error, is returned before
 * the settings are confirmed. If they moved, the guess is aborted and its answer dropped, and the
 * request is served again on the settings as read (401 if the key is no longer live): its answer
 * then is exactly what it would have been. Settings read as they are are served at once.
 */
export async function servedOnConfirmedSettings<T>(snapshot: Settings, request: GuessedRequest<T>): Promise<T> {
  if (!(snapshot instanceof ProvisionalSettings)) return request.serve(snapshot);
  const confirming = snapshot.confirmed();
  const confirmed = confirming.then(
    (settings) => settings === snapshot,
    () => false,
  );
  const controller = new AbortController();
  void confirmed.then((holds) => {
    if (!holds) controller.abort(new Error('The settings changed while the request was served on those last seen.'));
  });
  const outcome = await request.guess(snapshot, { confirmed, signal: controller.signal }).then(
    (answer) => ({ answer }),
    (error: unknown) => ({ error }),
  );
  let settings: Settings | null;
  try {
    settings = await confirming;
  } finally {
    if (!(await confirmed) && 'answer' in outcome && outcome.answer !== null) await request.drop(outcome.answer);
  }
  if (settings === null) throw new ApiError('invalid_api_key');
  if (settings !== snapshot) return request.serve(settings);
  if ('error' in outcome) throw outcome.error;
  // Nothing held to guess with: served on the settings now confirmed.
  return outcome.answer ?? request.serve(settings);
}
