import type { CommitPath, DatabaseTimings } from '../metrics/gateway';

/**
 * The database's timings, passed on to where they are kept once that exists: the database opens
 * before the metrics are made (runtime/node/deps.ts points it at them), and until then, or
 * where nothing keeps them, they go nowhere.
 */
export class TimingsRelay implements DatabaseTimings {
  #to: DatabaseTimings | null = null;

  reportTo(timings: DatabaseTimings): void {
    this.#to = timings;
  }

  statement(seconds: number): void {
    this.#to?.statement(seconds);
  }

  commit(path: CommitPath, seconds: number): void {
    this.#to?.commit(path, seconds);
  }
}
