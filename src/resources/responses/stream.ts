import type { Db } from '../../db/client';
import type { EventSink, ServerSentEvent } from '../../deps';
import type { RunRow } from '../../db/schema';
import { ResponseEvents, storedSearchQueries } from './events';
import { getResponseRow } from './queries';
import { describeResponse } from './wire';

/**
 * Deps.responseEvents: the sink a response's run engine sends its events into, which turns them
 * into the Responses API's (events.ts) before they reach the client's stream. The response's row
 * (what the events' response object shows of the request) is read with its first events: the
 * engine sends none before its rows are written.
 */
export function responseEvents(db: Db): (target: EventSink, run: RunRow) => EventSink {
  return (target, run) => {
    let translating: Promise<ResponseEvents> | null = null;
    const translator = async () => {
      const row = await getResponseRow(db, run.workspaceId, run.id);
      return new ResponseEvents(target, {
        describe: describeResponse(run, row),
        includeSearchResults: row.options.include?.includes('file_search_call.results') ?? false,
        searchedQueries: storedSearchQueries(db, run.id),
      });
    };
    let ready: ResponseEvents | null = null;
    return {
      send(events: ServerSentEvent[]): Promise<void> {
        if (ready) return ready.send(events);
        translating ??= translator().then((events) => (ready = events));
        return translating.then((sink) => sink.send(events));
      },
    };
  };
}
