import type { UpstreamFetch } from '../../providers/types';

/**
 * How many times a call is sent again after workerd reports its connection lost before any answer
 * (see workersUpstreamFetch).
 */
const LOST_CONNECTION_RETRIES = 2;

/**
 * Workers' upstream client: the runtime's fetch, with one failure taken care of. workerd keeps the
 * connections to an upstream open between calls, and one that the upstream closed while it sat
 * idle (HTTP servers close idle connections when they like: Node's and uvicorn's after 5 s) can be
 * handed to the next call before the runtime has noticed the close, the more often the busier its
 * machine. That call fails before any byte of an answer with `Network connection lost.`, an error
 * the runtime marks `retryable`, and it is sent again, up to LOST_CONNECTION_RETRIES times, within
 * the call's own deadline (its signal), a turn of the event loop later: by then the runtime has
 * dropped the other connections the upstream closed (sent again at once, a call met one of them).
 * Nothing else is sent again: not another failure, not a call whose signal aborted, never a call
 * whose answer had begun. A connection lost after the request was sent is reported the same way,
 * so a provider may on rare occasions receive a call twice and answer the first to no one, as the
 * official SDKs' retries of a lost connection do.
 */
export function workersUpstreamFetch(fetch: (url: string, init: RequestInit) => Promise<Response>): UpstreamFetch {
  return async (url, init) => {
    for (let retries = LOST_CONNECTION_RETRIES; ; retries--) {
      try {
        return await fetch(url, init);
      } catch (error) {
        if (retries === 0 || init.signal?.aborted || !isRetryable(error)) throw error;
      }
      await new Promise((resolve) => setTimeout(resolve, 0));
    }
  };
}

/** workerd's own verdict on a failed I/O call: `retryable` set on the error it throws. */
function isRetryable(error: unknown): boolean {
  return error instanceof Error && 'retryable' in error && error.retryable === true;
}
