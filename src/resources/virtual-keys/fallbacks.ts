import type { VirtualKey } from '../../db/schema';
import type { Deps } from '../../deps';
import type { UpstreamUrlOptions } from '../../lib/upstream-url';

/**
 * The keys a provider call may be made with, in order (providers/attempts.ts reads them as far as
 * it needs): the call's own key, then each of its fallbacks, found by slug as the caller finds keys
 * (a request's settings snapshot, so that all of them are of one generation; a run's database).
 * Only the key's own list is followed, each key once: a fallback's fallbacks are not, so the keys
 * tried are at most one more than the list's bound, whatever cycle concurrent writes made. A
 * fallback revoked since, or whose base_url the address rules now refuse, is passed over and said
 * so in a log line.
 */
export async function* callKeys(
  deps: Pick<Deps, 'upstreamUrls' | 'log'>,
  first: VirtualKey,
  find: (slug: string) => Promise<VirtualKey | null>,
  rules: UpstreamUrlOptions,
): AsyncGenerator<VirtualKey> {
  yield first;
  const seen = new Set([first.id]);
  for (const slug of first.fallbacks) {
    const key = await find(slug);
    if (!key || seen.has(key.id)) {
      if (!key) deps.log.warn('fallback virtual key passed over: no live key has its slug', fields(first, slug));
      continue;
    }
    seen.add(key.id);
    const problem = deps.upstreamUrls.check(key.baseUrl, rules);
    if (problem) {
      deps.log.warn('fallback virtual key passed over: its base_url is not allowed', {
        ...fields(first, slug),
        problem,
      });
      continue;
    }
    yield key;
  }
}

const fields = (first: VirtualKey, slug: string) => ({
  workspace_id: first.workspaceId,
  virtual_key: first.slug,
  fallback: slug,
});
