/**
 * `load` (a dynamic `import()`, usually) called at most once at a time and kept once it succeeds:
 * concurrent first calls share the one load, later calls get what it loaded, and a load that fails is
 * forgotten, so that the call after it tries again (a failure is not held for the process's life).
 */
export function loadOnce<T>(load: () => Promise<T>): () => Promise<T> {
  let loading: Promise<T> | undefined;
  return () =>
    (loading ??= load().catch((error: unknown) => {
      loading = undefined;
      throw error;
    }));
}
