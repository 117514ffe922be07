/**
 * Who calls, and the request it calls from, as plain values: what use-cases take from a request
 * beyond its body, whatever the framework. The auth middleware builds the Actor once per request
 * (resources/identities/middleware/workspace.ts); work done later on a caller's behalf (a run's
 * file searches) builds the part it needs from the rows that recorded it.
 */

/** Who calls: with which API key, for which workspace, with which virtual key when it names one. */
export interface Actor {
  /** The API key that authenticated the request: what usage and rate-limit policies attribute to. */
  apiKeyId: string;
  workspaceId: string;
  organisationId: string;
  /** The x-gateway-virtual-key header: the slug of the virtual key to call providers with, when named. */
  virtualKeySlug: string | undefined;
  /** The x-gateway-metadata header as sent: what else rate-limit policies match on (ratelimit/attributes.ts reads it). */
  metadataHeader: string | undefined;
}

/** The request a use-case is called from: what the runtime lends it, and its id. */
export interface RequestContext {
  /** Keeps `task` alive after the response: the runtime's ExecutionContext. The task handles its own errors. */
  waitUntil(task: Promise<unknown>): void;
  /** For log lines about work handed over (a run to its host). */
  requestId: string;
}
