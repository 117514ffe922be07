import type { Db } from '../../db/client';
import type { Deps } from '../../deps';
import type { ResponseRow, RunRow } from '../../db/schema';
import { ResponseEvents, storedSearchQueries, type ResponseEventsOptions } from './events';
import { describeResponse } from './wire';

/**
 * Deps.responseEvents: the sink a response's run engine sends its events into, which turns them
 * into the Responses API's (events.ts) before they reach the client's stream.
 */
export function responseEvents(db: Db): Deps['responseEvents'] {
  return async (target, run, response) => new ResponseEvents(target, responseEventsOptions(db, run, response));
}

/** How a response's events are told (live here, or replayed: replay.ts): its `include`, its container. */
export function responseEventsOptions(db: Db, run: RunRow, response: ResponseRow): ResponseEventsOptions {
  const include = response.options.include ?? [];
  return {
    describe: describeResponse(run, response),
    includeSearchResults: include.includes('file_search_call.results'),
    includeCodeOutputs: include.includes('code_interpreter_call.outputs'),
    searchedQueries: storedSearchQueries(db, run.id),
    containerId: response.containerId,
  };
}
