import type { Db } from '../db/client';
import { readPolicyPage, readPolicyVersion, type PolicyPage } from './policy-reads';
import { PolicyIndex, toActivePolicy, type ActivePolicy } from './matching';

/** Reads one page of a workspace's policies: readPolicyPage, unless a test injects a fault. */
export type PolicyLoader = typeof readPolicyPage;

interface Entry {
  /** Every change up to this version of the workspace's policies is in the index. */
  version: number;
  /** The settings' generation (db/settings-cache.ts) at which `version` was last found current. */
  settingsGeneration?: number;
  index: PolicyIndex;
  /** What the entry counts in the cache's weight (recorded: the index changes in place). */
  weight: number;
}

/**
 * Policies read per page, and so the work done between two turns of the event loop: reading and
 * parsing a page, counting or filing its policies. On the embedded database a read runs on the
 * event loop itself, so this bounds how long a reload of a large workspace can hold up others.
 */
const PAGE_SIZE = 100;

/** Lets the event loop serve others (timers work on both runtimes; a resolved promise would not). */
const nextTurn = () => new Promise<void>((resolve) => setTimeout(resolve, 0));

/**
 * The active policies of recently seen workspaces, indexed for matching, one cache per process
 * (Node) or isolate (Workers). Every lookup first reads the workspace's policy version (one
 * primary-key read), which triggers on the policies table bump in the same transaction as any
 * change, wherever it comes from: a change made by this process, another gateway or the CLI governs
 * the very next request. The same changes move the settings' generation (db/settings-cache.ts),
 * which a request reads at its start: given it, a lookup skips the version read while the entry
 * was last found current at that generation.
 *
 * A changed version refreshes the workspace once, however many requests ask at the same moment,
 * and the refresh costs the change, not the workspace: each policy row carries the version of its
 * last change, so a refresh reads only the rows above the cached version and updates the index in
 * place (an archived row leaves it). Only a cold cache, or a row gone from the workspace (deleted
 * or moved by plain SQL, which an incremental read cannot see), loads everything; that load reads
 * and indexes a page at a time, letting other requests run in between, and replaces the index
 * only when complete. Either way no turn of the event loop does more than a page of work.
 */
export class PolicyCache {
  readonly #db: Db;
  readonly #maxPolicies: number;
  readonly #loadPage: PolicyLoader;
  /** In least-recently-used order: a hit moves its workspace to the end. */
  readonly #entries = new Map<string, Entry>();
  /** The refresh under way per workspace: one at a time, since a refresh changes the index in place. */
  readonly #refreshing = new Map<string, Promise<void>>();
  /** The weight of every entry: its policies, and at least 1, so that empty workspaces count too. */
  #weight = 0;

  /**
   * @param options.maxPolicies the most policies kept over all workspaces (a workspace without
   *   any counts as one): beyond it the least recently used workspaces are dropped; the one just
   *   loaded stays, however large.
   * @param options.load how a page of a workspace's policies is read (default: readPolicyPage).
   */
  constructor(db: Db, options: { maxPolicies?: number; load?: PolicyLoader } = {}) {
    this.#db = db;
    this.#maxPolicies = options.maxPolicies ?? 200_000;
    this.#loadPage = options.load ?? readPolicyPage;
  }

  /**
   * The workspace's index at its current version: as of `settingsGeneration` (the request's
   * settings, read at its start) when given, else as of now. A refresh that another request started belongs
   * to that request: on Workers, when it is cancelled its I/O fails, and the requests waiting on it
   * would fail with it. So a caller whose shared refresh failed refreshes on its own, and only the
   * failure of its own refresh is its failure.
   */
  async get(workspaceId: string, settingsGeneration: number | null = null): Promise<PolicyIndex> {
    // A change to the workspace's policies moves the settings' generation too: at the generation
    // the entry was last found current, it still is, and the version need not be read.
    const held = this.peek(workspaceId, settingsGeneration);
    if (held) return held;
    const version = await readPolicyVersion(this.#db, workspaceId);
    for (;;) {
      const entry = this.#entries.get(workspaceId);
      if (entry && entry.version >= version) {
        // Read before the version was, the generation is no newer than the state the entry holds.
        if (settingsGeneration !== null) entry.settingsGeneration = settingsGeneration;
        return this.#touch(workspaceId, entry);
      }
      const running = this.#refreshing.get(workspaceId);
      if (running) {
        await running.catch(() => undefined);
        continue;
      }
      await this.#start(workspaceId);
    }
  }

  /**
   * The workspace's index as get() answers it without reading anything: held at `settingsGeneration`;
   * undefined otherwise (get() would read the version first).
   */
  peek(workspaceId: string, settingsGeneration: number | null): PolicyIndex | undefined {
    const held = this.#entries.get(workspaceId);
    if (held && settingsGeneration !== null && held.settingsGeneration === settingsGeneration)
      return this.#touch(workspaceId, held);
    return undefined;
  }

  #touch(workspaceId: string, entry: Entry): PolicyIndex {
    this.#entries.delete(workspaceId);
    this.#entries.set(workspaceId, entry);
    return entry.index;
  }

  #start(workspaceId: string): Promise<void> {
    const started = this.#refresh(workspaceId).finally(() => this.#refreshing.delete(workspaceId));
    this.#refreshing.set(workspaceId, started);
    return started;
  }

  /** Brings the entry up to date: incrementally when it can, else by a full load. */
  async #refresh(workspaceId: string): Promise<void> {
    const entry = this.#entries.get(workspaceId);
    if (!entry) return this.#loadAll(workspaceId);
    let page = await this.#loadPage(this.#db, workspaceId, { changedAfter: entry.version }, PAGE_SIZE);
    if (page.fullReloadVersion > entry.version) return this.#loadAll(workspaceId);
    // Rows changed while the pages are read come again on a later page (their version is higher),
    // or at the next refresh, from the first page's version.
    const version = page.version;
    for (;;) {
      for (const policy of page.policies) {
        if (policy.active) entry.index.upsert(toActivePolicy(policy));
        else entry.index.remove(policy.id);
      }
      const last = page.policies.at(-1);
      if (!last || page.policies.length < PAGE_SIZE) break;
      await nextTurn();
      page = await this.#loadPage(this.#db, workspaceId, { changedAfter: last.version }, PAGE_SIZE);
    }
    entry.version = Math.max(entry.version, version);
    this.#put(workspaceId, entry);
  }

  /**
   * Every active policy, a page at a time, at the version of the first page: a row that changed
   * after it is read again by the next refresh. Counted page by page, then filed page by page, so
   * that each policy's anchor is chosen among all of them (see PolicyIndex).
   */
  async #loadAll(workspaceId: string): Promise<void> {
    const index = new PolicyIndex();
    const pages: ActivePolicy[][] = [];
    let page: PolicyPage = await this.#loadPage(this.#db, workspaceId, { afterSeq: 0 }, PAGE_SIZE);
    const version = page.version;
    for (;;) {
      const policies = page.policies.map(toActivePolicy);
      index.count(policies);
      pages.push(policies);
      const last = page.policies.at(-1);
      if (!last || page.policies.length < PAGE_SIZE) break;
      await nextTurn();
      page = await this.#loadPage(this.#db, workspaceId, { afterSeq: last.seq }, PAGE_SIZE);
    }
    for (const [i, policies] of pages.entries()) {
      if (i > 0) await nextTurn();
      index.file(policies);
    }
    const current = this.#entries.get(workspaceId);
    if (!current || current.version <= version) this.#put(workspaceId, { version, index, weight: 0 });
  }

  /** Stores the entry as the most recently used, then drops the least recently used beyond the bound. */
  #put(workspaceId: string, entry: Entry) {
    this.#remove(workspaceId);
    entry.weight = Math.max(1, entry.index.size);
    this.#entries.set(workspaceId, entry);
    this.#weight += entry.weight;
    for (const oldest of this.#entries.keys()) {
      if (this.#weight <= this.#maxPolicies || oldest === workspaceId) break;
      this.#remove(oldest);
    }
  }

  #remove(workspaceId: string) {
    const entry = this.#entries.get(workspaceId);
    if (!entry) return;
    this.#entries.delete(workspaceId);
    this.#weight -= entry.weight;
  }

  /** The policies held now, counting a workspace without any as one. */
  get weight(): number {
    return this.#weight;
  }
}
