import type { Db } from '../../db/client';
import type { EventSink } from '../../deps';
import type { ResponseRow, RunRow } from '../../db/schema';
import { ResponseEvents, storedSearchQueries } from './events';
import { describeResponse } from './wire';

/**
 * Deps.responseEvents: the sink a response's run engine sends its events into, which turns them
 * into the Responses API's (events.ts) before they reach the client's stream.
 */
export function responseEvents(db: Db): (target: EventSink, run: RunRow, response: ResponseRow) => EventSink {
  return (target, run, response) =>
    new ResponseEvents(target, {
      describe: describeResponse(run, response),
      includeSearchResults: response.options.include?.includes('file_search_call.results') ?? false,
      searchedQueries: storedSearchQueries(db, run.id),
    });
}
