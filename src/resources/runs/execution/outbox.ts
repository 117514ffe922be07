import type { EventSink } from '../../../deps';
import type { ServerSentEvent } from '../../../deps';

/** An event, or a function that builds it: built only when someone receives the run's events. */
export type OutgoingEvent = ServerSentEvent | (() => ServerSentEvent);

/**
 * How long after its announcement has left a row's insert waits before it starts, unless a write
 * needs the row first (`written`) or the turn's end takes it (`take`).
 */
export const INSERT_DELAY_MS = 100;

/** Rows a turn opened (Outbox.open): their insert, and how far it has gone. */
export class OpenedRows {
  /** announcing: until the next send leaves; waiting: for INSERT_DELAY_MS; taken: the turn's end writes them. */
  state: 'announcing' | 'waiting' | 'started' | 'taken' = 'announcing';

  constructor(readonly insert: () => PromiseLike<unknown>) {}

  /** Whether their insert can still start, or be taken. */
  get unstarted(): boolean {
    return this.state === 'announcing' || this.state === 'waiting';
  }
}

/**
 * A turn's way out: the events its client receives and the rows it writes, kept in the one order
 * that lets every step a client observes be in the database by the time the turn writes anything
 * after it.
 *
 *   1. A row the turn opens (its message, a step) is announced with the next event that leaves,
 *      and its insert starts INSERT_DELAY_MS after that event has left: the first delta never waits
 *      on the database (on a remote one, a round trip per row), and on the embedded database the
 *      insert's commit follows the bytes instead of delaying them.
 *   2. A turn that ends before then takes the rows (`take`) and inserts them as they end, in its
 *      closing commit: a short answer's message and step are each written once, not inserted and
 *      then updated in a second commit (two statements and a commit fewer per run). If that commit
 *      fails, they are given back (`failCommit`) and inserted as they were opened, so that the
 *      failure is settled on rows that exist. A turn that streams longer has them written while it
 *      streams, so that a client polling the thread sees its message in progress.
 *   3. Every later write of the run waits for the inserts not taken first (`written`, which starts
 *      those still waiting); their failure is the turn's.
 *   4. Events that describe a commit's statements (a message completed, a step failed) leave only
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
  readonly #insertDelayMs: number;
  /** Announcements of the rows opened since the last send. */
  #announced: ServerSentEvent[] = [];
  /** The rows opened since the last send: announced with it. */
  #opened: OpenedRows[] = [];
  /** Rows whose announcement has left, until their insert starts (#timer) or the turn takes them. */
  #waiting: OpenedRows[] = [];
  #timer: ReturnType<typeof setTimeout> | null = null;
  /** Inserts started and not yet waited for. */
  #started: Promise<unknown>[] = [];
  /** Rows taken by the commit being prepared: written by it, or given back if it fails. */
  #taken: OpenedRows[] = [];
  /** Events of the commit being prepared. */
  #commit: (() => ServerSentEvent)[] = [];
  /** While the run's rows commit: the last send queued behind that commit (or the commit itself). */
  #queue: Promise<unknown> | null;

  /** `insertDelayMs`: INSERT_DELAY_MS unless a test says otherwise. */
  constructor(sink: EventSink | undefined, rowsWritten?: Promise<unknown>, insertDelayMs = INSERT_DELAY_MS) {
    this.#sink = sink;
    this.#insertDelayMs = insertDelayMs;
    this.#queue = rowsWritten ?? null;
  }

  /** Whether sends queue behind the run's rows' commit, still under way. */
  get queueing(): boolean {
    return this.#queue !== null;
  }

  /** A row the turn opened: `insert` writes it; `announce` builds the events that say so. */
  open(insert: () => PromiseLike<unknown>, announce: () => ServerSentEvent[]): OpenedRows {
    const rows = new OpenedRows(insert);
    this.#opened.push(rows);
    if (this.#sink) this.#announced.push(...announce());
    return rows;
  }

  /**
   * Whether the turn takes `rows` to write them itself, in the commit that ends them: true while
   * their insert has not started, which then never will (their announcement leaves all the same).
   */
  take(rows: OpenedRows): boolean {
    if (!rows.unstarted) return false;
    // Left where it is listed: a row is started only while it is unstarted.
    rows.state = 'taken';
    this.#taken.push(rows);
    return true;
  }

  /** Sends `events` after the announcements of what was opened since; those rows' inserts wait from then on. */
  send(...events: OutgoingEvent[]): Promise<void> {
    const announced = this.#announced;
    const opened = this.#opened;
    this.#announced = [];
    this.#opened = [];
    // Events alone (a delta's, the usual send) go straight to the sink: nothing to do after them.
    const deliver = () => (opened.length === 0 ? this.#sendOnly(events) : this.#deliver(announced, opened, events));
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

  #sendOnly(events: OutgoingEvent[]): Promise<void> {
    return this.#sink ? this.#sink.send(events.map(build)) : NOTHING_SENT;
  }

  async #deliver(announced: ServerSentEvent[], opened: OpenedRows[], events: OutgoingEvent[]): Promise<void> {
    if (this.#sink) await this.#sink.send([...announced, ...events.map(build)]);
    for (const rows of opened) {
      if (rows.state !== 'announcing') continue;
      rows.state = 'waiting';
      this.#waiting.push(rows);
    }
    this.#wait();
  }

  /** Inserts start INSERT_DELAY_MS from now for the rows waiting (and any that join them). */
  #wait(): void {
    if (this.#waiting.length > 0 && this.#timer === null)
      this.#timer = setTimeout(() => this.#startWaiting(), this.#insertDelayMs);
  }

  /** An event describing a statement of the commit being prepared: sent by `committed`. */
  onCommit(event: () => ServerSentEvent): void {
    this.#commit.push(event);
  }

  /** The commit succeeded: sends its events, then `events`. */
  async committed(...events: OutgoingEvent[]): Promise<void> {
    const described = this.#commit;
    this.#commit = [];
    this.#taken = [];
    await this.send(...described, ...events);
  }

  /** The commit ran but changed nothing it describes (the run was no longer in progress): its events are dropped. */
  discardCommit(): void {
    this.#commit = [];
    this.#taken = [];
  }

  /**
   * The commit failed: its events are dropped, and the rows it took are given back, to be inserted
   * as they were opened before the turn writes anything else (`written`), as if never taken.
   */
  failCommit(): void {
    this.#commit = [];
    for (const rows of this.#taken) {
      rows.state = 'waiting';
      this.#waiting.push(rows);
    }
    this.#taken = [];
    this.#wait();
  }

  /** Waits until every row opened so far and not taken is written (starting the inserts not started yet). */
  async written(): Promise<void> {
    if (this.#queue !== null) await this.#queue;
    for (const rows of this.#opened) this.#start(rows);
    this.#opened = [];
    this.#startWaiting();
    const started = this.#started;
    this.#started = [];
    await Promise.all(started);
  }

  #startWaiting(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    for (const rows of this.#waiting) this.#start(rows);
    this.#waiting = [];
  }

  #start(rows: OpenedRows): void {
    if (!rows.unstarted) return;
    rows.state = 'started';
    // Drizzle queries run on every `then`: resolve it exactly once, here.
    const promise = Promise.resolve(rows.insert());
    promise.catch(() => undefined); // observed by written(); this only keeps it from being "unhandled"
    this.#started.push(promise);
  }
}

const NOTHING_SENT: Promise<void> = Promise.resolve();

const build = (event: OutgoingEvent): ServerSentEvent => (typeof event === 'function' ? event() : event);
