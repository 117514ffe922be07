import type { EventSink, ServerSentEvent } from './event-stream';

/** An event, or a function that builds it: built only when someone receives the run's events. */
export type OutgoingEvent = ServerSentEvent | (() => ServerSentEvent);

/**
 * A turn's way out: the events its client receives and the rows it writes, kept in the one order
 * that lets every step a client observes be in the database before or as its event leaves.
 *
 *   1. A row the turn opens (its message, a step) is announced with the next event that leaves,
 *      and its insert starts right after that event has left: the first delta never waits on the
 *      database (on a remote one, a round trip per row), and on the embedded database the insert's
 *      commit, which holds the event loop, follows the bytes instead of delaying them.
 *   2. Every later write of the run waits for those inserts first (`written`); their failure is the
 *      turn's.
 *   3. Events that describe a commit's statements (a message completed, a step failed) leave only
 *      once the commit succeeded (`committed`); a commit that wrote nothing drops them.
 *
 * Without a sink (a run that is polled), nothing is sent and no event is built; the rows are
 * written all the same.
 *
 * A run's first turn may begin while the run's own rows still commit (`rowsWritten`: the upstream
 * call starts meanwhile). Until that commit has succeeded, sends queue in their order and nothing
 * leaves or is written; if it fails, every send and `written` rejects with its error.
 */
export class Outbox {
  readonly #sink: EventSink | undefined;
  /** Announcements of the rows opened since the last send. */
  #announced: ServerSentEvent[] = [];
  /** Inserts of the rows opened since the last send: started once it has left. */
  #unstarted: (() => PromiseLike<unknown>)[] = [];
  /** Inserts started and not yet waited for. */
  #started: Promise<unknown>[] = [];
  /** Events of the commit being prepared. */
  #commit: (() => ServerSentEvent)[] = [];
  /** While the run's rows commit: the last send queued behind that commit (or the commit itself). */
  #queue: Promise<unknown> | null;

  constructor(sink: EventSink | undefined, rowsWritten?: Promise<unknown>) {
    this.#sink = sink;
    this.#queue = rowsWritten ?? null;
  }

  /** Whether sends queue behind the run's rows' commit, still under way. */
  get queueing(): boolean {
    return this.#queue !== null;
  }

  /** A row the turn opened: `insert` writes it; `announce` builds the events that say so. */
  open(insert: () => PromiseLike<unknown>, announce: () => ServerSentEvent[]): void {
    this.#unstarted.push(insert);
    if (this.#sink) this.#announced.push(...announce());
  }

  /** Sends `events` after the announcements of what was opened since, then starts those rows' inserts. */
  send(...events: OutgoingEvent[]): Promise<void> {
    const announced = this.#announced;
    const unstarted = this.#unstarted;
    this.#announced = [];
    this.#unstarted = [];
    const deliver = () => this.#deliver(announced, unstarted, events);
    const queue = this.#queue;
    if (queue === null) return deliver();
    const sent = queue.then(deliver);
    this.#queue = sent;
    // The queue ends with its last send: from then on, sends go straight out.
    sent.then(
      () => {
        if (this.#queue === sent) this.#queue = null;
      },
      () => undefined,
    );
    return sent;
  }

  async #deliver(announced: ServerSentEvent[], unstarted: (() => PromiseLike<unknown>)[], events: OutgoingEvent[]): Promise<void> {
    if (this.#sink) await this.#sink.send([...announced, ...events.map(build)]);
    for (const insert of unstarted) this.#start(insert);
  }

  /** An event describing a statement of the commit being prepared: sent by `committed`. */
  onCommit(event: () => ServerSentEvent): void {
    this.#commit.push(event);
  }

  /** The commit succeeded: sends its events, then `events`. */
  async committed(...events: OutgoingEvent[]): Promise<void> {
    const described = this.#commit;
    this.#commit = [];
    await this.send(...described, ...events);
  }

  /** The commit failed or wrote nothing: its events are dropped. */
  discardCommit(): void {
    this.#commit = [];
  }

  /** Waits until every row opened so far is written (starting the inserts not started yet). */
  async written(): Promise<void> {
    if (this.#queue !== null) await this.#queue;
    for (const insert of this.#unstarted) this.#start(insert);
    this.#unstarted = [];
    const started = this.#started;
    this.#started = [];
    await Promise.all(started);
  }

  #start(insert: () => PromiseLike<unknown>): void {
    // Drizzle queries run on every `then`: resolve it exactly once, here.
    const promise = Promise.resolve(insert());
    promise.catch(() => undefined); // observed by written(); this only keeps it from being "unhandled"
    this.#started.push(promise);
  }
}

const build = (event: OutgoingEvent): ServerSentEvent => (typeof event === 'function' ? event() : event);
