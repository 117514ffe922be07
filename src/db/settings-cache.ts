import { eq } from 'drizzle-orm';
import { preparedQuery, type Db, type RawStatement } from './client';
import { settingsGeneration, type AssistantRow, type AuthenticatedKey, type VirtualKey } from './schema';

/**
 * The settings every request reads (its API key; a run's assistant and virtual key), kept in
 * memory per process (Node) or isolate (Workers) for one generation of the database's settings
 * (settings_generation in schema.ts, bumped by triggers on every change to them, whoever makes it).
 * A request reads that one row first (SettingsCache.now, in the API-key middleware); its lookups
 * then answer from memory while the generation is the one their entry was read at, and read the
 * rows, as before, when it is not. So a change made anywhere (this gateway, another, the CLI, plain
 * SQL) governs the very next request, exactly as reading the rows every time would.
 *
 * Changes to rate-limit policies move the generation too, so the policy cache skips its version
 * read while it holds (ratelimit/policy-cache.ts). On the embedded database a run's creation reads
 * one row instead of five; on Workers, where each read is a round trip to the database, that is
 * four round trips fewer.
 *
 * Only what was found is kept (an unknown key or an unknown assistant reads again: guesses cannot
 * crowd out what is used), frozen (requests share it), within a weight: about the characters of its
 * JSON, the least recently used dropped beyond it.
 *
 * What a lookup reads when it does not answer from memory is the resources' own query, handed in
 * by whoever builds the cache (runtime/settings-loaders.ts): the cache knows their answers' shapes
 * (schema.ts), not how they are read.
 */
export class SettingsCache {
  readonly #db: Db;
  readonly #loaders: SettingsLoaders;
  readonly #shelves: Shelves;
  readonly #provisional: boolean;

  /**
   * @param options.maxWeight the characters (of JSON) kept over all entries; default 16 Mi.
   * @param options.provisional whether `provisional` answers: for a database server, where reading
   *   the generation with a request's reads saves a round trip. On the embedded file a read costs no
   *   trip, and reading the generation first keeps every lookup in memory.
   */
  constructor(db: Db, loaders: SettingsLoaders, options: { maxWeight?: number; provisional?: boolean } = {}) {
    const maxWeight = options.maxWeight ?? 16 * 1024 * 1024;
    this.#provisional = options.provisional ?? false;
    this.#db = db;
    this.#loaders = loaders;
    // A shelf per kind of lookup, each within its share of the weight.
    this.#shelves = {
      apiKeys: new Shelf(maxWeight / 8),
      assistants: new Shelf((maxWeight * 5) / 8),
      virtualKeys: new Shelf((maxWeight * 2) / 8),
    };
  }

  /** The settings as they are now: what a request reads once, before its lookups. */
  async now(): Promise<Settings> {
    return new Settings(this.#shelves, this.#loaders, await this.#generation());
  }

  /**
   * The settings as they are now, and the key `presented` found live in them (null otherwise): what
   * a request that cannot start on settings assumed unchanged reads first. On a database server,
   * when the key is not held at the generation last read (its first request here, or the first after
   * a change made here, which moves the generation), its row is read beside the generation: one round
   * trip (coalescing-client.ts), where reading it after would be a second.
   */
  async authenticate(presented: string): Promise<{ settings: Settings; apiKey: AuthenticatedKey | null }> {
    const latest = this.#latest;
    const held = latest !== undefined && this.#shelves.apiKeys.peek(latest, presented) !== undefined;
    if (!this.#provisional || held) {
      const settings = await this.now();
      return { settings, apiKey: await settings.apiKey(presented) };
    }
    const [generation, found] = await Promise.all([this.#generation(), this.#loaders.apiKey(presented)]);
    // Kept at the generation its own statement saw (one snapshot), which may not be the one read beside it.
    if (found && found.generation !== null) this.#shelves.apiKeys.keep(found.generation, presented, found.key);
    return { settings: new Settings(this.#shelves, this.#loaders, generation), apiKey: found?.key ?? null };
  }

  /**
   * For a request presenting `presented`: the settings as they were when this process or isolate
   * last read the generation, assumed to be still the database's (ProvisionalSettings), with the
   * key found live then; null if it was not kept then, before any read, and always where the cache
   * was not built `provisional`. `check` says when the generation is read again: `now`, to travel
   * with the request's own first reads, or `on demand`, for a request whose first statement is a
   * write that carries the check itself (ProvisionalSettings.guard). `live()` says whether the key
   * still is.
   */
  provisional(
    presented: string,
    check: 'now' | 'on demand' = 'now',
  ): { settings: ProvisionalSettings; apiKey: AuthenticatedKey } | null {
    if (!this.#provisional || this.#latest === undefined) return null;
    const generation = this.#latest;
    const apiKey = this.#shelves.apiKeys.peek(generation, presented);
    if (!apiKey) return null;
    const settings = new ProvisionalSettings(this.#shelves, this.#loaders, generation, () =>
      this.#stillLive(generation, presented, apiKey),
    );
    if (check === 'now') void settings.live().catch(() => undefined);
    return { settings, apiKey };
  }

  /**
   * Whether `apiKey`, kept at `generation`, is live now: it is if the generation has not moved
   * (`current`), or if it is found again in the settings at the generation just read (`now`: the
   * generation is not read a second time).
   */
  async #stillLive(generation: number | null, presented: string, apiKey: AuthenticatedKey): Promise<Confirmation> {
    const read = await this.#generation();
    if (read === generation) return { live: true, current: true, now: null };
    const settings = new Settings(this.#shelves, this.#loaders, read);
    const now = await settings.apiKey(presented);
    return {
      live: now?.id === apiKey.id && now.workspace?.id === apiKey.workspace?.id,
      current: false,
      now: settings,
    };
  }

  /** The last generation read; undefined before the first, and after a change made here (changed()). */
  #latest: number | null | undefined;
  /** How many times changed() was called: a read that started before a change does not make #latest. */
  #changes = 0;

  async #generation(): Promise<number | null> {
    const changes = this.#changes;
    const [row] = await generationRow(this.#db).all();
    const generation = row?.value ?? null;
    if (changes === this.#changes) this.#latest = generation;
    return generation;
  }

  /**
   * This process or isolate changed the settings (an assistant, a key, a policy): the generation it
   * last read is past, so no request starts on it (provisional() answers null) until it is read
   * again. A request that did would find its guard failing after it had admitted the run on what
   * the settings were, and a run whose provider was called beside its write would call it twice.
   */
  changed(): void {
    this.#latest = undefined;
    this.#changes++;
  }

  /** What the entries weigh now. */
  get weight(): number {
    const { apiKeys, assistants, virtualKeys } = this.#shelves;
    return apiKeys.weight + assistants.weight + virtualKeys.weight;
  }
}

/** What a run of `model` names of its virtual key: its slug (x-gateway-virtual-key), if any. */
export interface VirtualKeyRequest {
  slug: string | undefined;
  model: string;
}

/** What reading the generation again found (ProvisionalSettings): `now`, the settings read when it had moved. */
interface Confirmation {
  live: boolean;
  current: boolean;
  now: Settings | null;
}

/** A key found live, and the settings' generation of the snapshot it was read in (null: no generation row). */
export interface KeyAt {
  key: AuthenticatedKey;
  generation: number | null;
}

/** The reads behind the lookups, when they are not answered from memory. */
export interface SettingsLoaders {
  /** authenticateApiKey: the key presented, if it is live, with the generation it was read at. */
  apiKey(presented: string): Promise<KeyAt | null>;
  /** getAssistant: the workspace's live assistant, or 404. */
  assistant(workspaceId: string, id: string): Promise<AssistantRow>;
  /** resolveVirtualKey: the key a run of `model` executes with, or the error saying why there is none. */
  virtualKey(workspaceId: string, request: VirtualKeyRequest): Promise<VirtualKey>;
}

interface Shelves {
  apiKeys: Shelf<AuthenticatedKey | null>;
  assistants: Shelf<AssistantRow>;
  virtualKeys: Shelf<VirtualKey>;
}

/** The settings at one generation: the lookups of one request (see SettingsCache). */
export class Settings {
  protected readonly shelves: Shelves;
  protected readonly loaders: SettingsLoaders;
  /** Null when the database has no generation row: nothing is kept then. */
  readonly generation: number | null;

  constructor(shelves: Shelves, loaders: SettingsLoaders, generation: number | null) {
    this.shelves = shelves;
    this.loaders = loaders;
    this.generation = generation;
  }

  /**
   * Whether the key the request presented is live: known when these settings were read. A request
   * on ProvisionalSettings asks before it writes, or calls a provider, and before it answers.
   */
  live(): Promise<boolean> {
    return LIVE;
  }

  /**
   * The settings a request is served on once what it assumed is checked: these, read as they are;
   * for ProvisionalSettings, these if the generation read again is theirs, else the settings read
   * then (the key found live in them), and null if the key is not live.
   */
  confirmed(): Promise<Settings | null> {
    return Promise.resolve(this);
  }

  /** A statement to lead a write's batch that fails it if the settings moved: none, known as these are. */
  guard(): RawStatement | null {
    return null;
  }

  /** A write led by guard() committed. */
  guardHeld(): void {}

  /** authenticateApiKey: the key presented, if it is live. */
  apiKey(presented: string): Promise<AuthenticatedKey | null> {
    return this.shelves.apiKeys.get(
      this.generation,
      presented,
      async () => (await this.loaders.apiKey(presented))?.key ?? null,
    );
  }

  /** getAssistant: the workspace's live assistant, or 404. */
  assistant(workspaceId: string, id: string): Promise<AssistantRow> {
    return this.shelves.assistants.get(this.generation, assistantKey(workspaceId, id), () =>
      this.loaders.assistant(workspaceId, id),
    );
  }

  /** resolveVirtualKey: the key a run of `model` executes with, or the error saying why there is none. */
  virtualKey(workspaceId: string, request: VirtualKeyRequest): Promise<VirtualKey> {
    return this.shelves.virtualKeys.get(this.generation, virtualKeyKey(workspaceId, request), () =>
      this.loaders.virtualKey(workspaceId, request),
    );
  }

  /**
   * What this process or isolate holds of the assistant at these settings' generation, reading
   * nothing: undefined if it holds none. Exact once the generation is known to be the database's
   * (for ProvisionalSettings, by a write its guard() led); so is keptVirtualKey's.
   */
  keptAssistant(workspaceId: string, id: string): AssistantRow | undefined {
    return this.shelves.assistants.peek(this.generation, assistantKey(workspaceId, id));
  }

  /** What this process or isolate holds of the virtual key (keptAssistant), reading nothing. */
  keptVirtualKey(workspaceId: string, request: VirtualKeyRequest): VirtualKey | undefined {
    return this.shelves.virtualKeys.peek(this.generation, virtualKeyKey(workspaceId, request));
  }

  /**
   * Whether these settings are the database's now: so for Settings, read as they are; for
   * ProvisionalSettings, once the generation read again is theirs (the key live, and what they keep exact).
   */
  holds(): Promise<boolean> {
    return LIVE;
  }
}

const assistantKey = (workspaceId: string, id: string) => `${workspaceId} ${id}`;

const virtualKeyKey = (workspaceId: string, request: VirtualKeyRequest) =>
  request.slug === undefined ? `${workspaceId} for ${request.model}` : `${workspaceId} ${request.slug}`;

const LIVE = Promise.resolve(true);

/** The columns a guard's refusal names (ProvisionalSettings.guard): isUniqueViolation's. */
export const GENERATION_MOVED = 'settings_generation.id';

/**
 * Settings assumed to be at the generation last read, not read again before the request's own
 * reads (SettingsCache.provisional): the presented API key came from memory, kept at that
 * generation; every other lookup reads its rows, as if nothing were kept, so that it is exact
 * whatever the generation. The generation is read with the request's first reads (one round trip
 * to a database server: coalescing-client.ts), and if it moved, the key is looked up again: `live()`.
 * So what the request read stands once the key is known to be live, and the request must ask before
 * anything it does takes effect (resources/identities/api-key-auth.ts: keyLive).
 */
export class ProvisionalSettings extends Settings {
  readonly #check: () => Promise<Confirmation>;
  #live: Promise<boolean> | null = null;
  /** Whether the generation read again was this one: then what is kept at it is exact, and used. */
  #current = false;
  /** The settings read when the generation had moved. */
  #now: Settings | null = null;

  constructor(
    shelves: Shelves,
    loaders: SettingsLoaders,
    generation: number | null,
    check: () => Promise<Confirmation>,
  ) {
    super(shelves, loaders, generation);
    this.#check = check;
  }

  /** Reads the generation again (and the key, if it moved), once. */
  override live(): Promise<boolean> {
    this.#live ??= this.#check().then((found) => {
      this.#current = found.current;
      this.#now = found.now;
      return found.live;
    });
    return this.#live;
  }

  override async confirmed(): Promise<Settings | null> {
    if (!(await this.live())) return null;
    return this.#current ? this : this.#now;
  }

  /**
   * While the generation is not known to be this one: a statement to lead a write's batch that
   * fails the batch, writing nothing, if it has moved (it would insert a second row with the one
   * row's id: isUniqueViolation(error, GENERATION_MOVED)); then the caller asks live() and writes
   * again without it. A batch it led that committed proves the generation (guardHeld).
   */
  override guard(): RawStatement | null {
    if (this.#live !== null) return null;
    return {
      sql: 'insert into "settings_generation" ("id", "value") select "id", "value" from "settings_generation" where "id" = 0 and "value" is not ?',
      args: [this.generation],
    };
  }

  override guardHeld(): void {
    this.#current = true;
    this.#live = LIVE;
  }

  override async holds(): Promise<boolean> {
    return (await this.live()) && this.#current;
  }

  /**
   * Read from the database until the generation is known to be this one; kept at it once it is:
   * read after this generation was and before it was read again unchanged, the row is this
   * generation's (so the next run on these settings finds it: Settings.keptAssistant).
   */
  override async assistant(workspaceId: string, id: string): Promise<AssistantRow> {
    if (this.#current) return super.assistant(workspaceId, id);
    const row = await this.loaders.assistant(workspaceId, id);
    const { generation } = this;
    void this.holds().then(
      (holds) => {
        if (holds && generation !== null) this.shelves.assistants.keep(generation, assistantKey(workspaceId, id), row);
      },
      () => undefined,
    );
    return row;
  }

  override virtualKey(workspaceId: string, request: VirtualKeyRequest): Promise<VirtualKey> {
    return this.#current ? super.virtualKey(workspaceId, request) : this.loaders.virtualKey(workspaceId, request);
  }
}

/** Values of one kind of lookup by key, each read at a generation, within a weight. */
class Shelf<T> {
  readonly #maxWeight: number;
  /** In least-recently-used order: a hit moves its entry to the end. */
  readonly #entries = new Map<string, { generation: number; value: T; weight: number }>();
  #weight = 0;

  constructor(maxWeight: number) {
    this.#maxWeight = maxWeight;
  }

  get weight(): number {
    return this.#weight;
  }

  /** The value kept for `key` at `generation`, without reading it; undefined if none is. */
  peek(generation: number | null, key: string): T | undefined {
    const entry = this.#entries.get(key);
    return entry && generation !== null && entry.generation === generation ? entry.value : undefined;
  }

  /** `load()`'s answer at `generation`: kept from an earlier request when read at the same one. */
  async get(generation: number | null, key: string, load: () => Promise<T>): Promise<T> {
    const entry = this.#entries.get(key);
    if (entry && generation !== null && entry.generation === generation) {
      this.#entries.delete(key);
      this.#entries.set(key, entry);
      return entry.value;
    }
    const value = await load();
    if (value !== null && generation !== null) this.keep(generation, key, value);
    return value;
  }

  /** Keeps `value` for `key` at `generation` (frozen: requests share it), within the shelf's weight. */
  keep(generation: number, key: string, value: T): void {
    this.#remove(key);
    const weight = key.length + JSON.stringify(value).length;
    if (weight > this.#maxWeight) return;
    this.#entries.set(key, { generation, value: deepFreeze(value), weight });
    this.#weight += weight;
    for (const oldest of this.#entries.keys()) {
      if (this.#weight <= this.#maxWeight) break;
      this.#remove(oldest);
    }
  }

  #remove(key: string): void {
    const entry = this.#entries.get(key);
    if (!entry) return;
    this.#entries.delete(key);
    this.#weight -= entry.weight;
  }
}

const generationRow = preparedQuery((db) =>
  db
    .select({ value: settingsGeneration.value })
    .from(settingsGeneration)
    .where(eq(settingsGeneration.id, 0))
    .limit(1)
    .prepare(),
);

/** Freezes `value` and everything in it: an entry is shared by every request that reads it. */
function deepFreeze<T>(value: T): T {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value)) return value;
  for (const inner of Object.values(value)) deepFreeze(inner);
  return Object.freeze(value);
}
