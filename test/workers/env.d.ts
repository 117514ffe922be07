// What `wrangler types` would generate, written by hand so that it does not depend on a local
// .dev.vars: the Worker's bindings, and its main module for `exports` from cloudflare:workers.
// (A .d.ts escapes skipLibCheck's errors: check changes here by copying it to a .ts once.)
import type { Env as WorkerEnv } from '../../src/worker';

declare global {
  namespace Cloudflare {
    interface Env extends WorkerEnv {}
    interface GlobalProps {
      mainModule: typeof import('../../src/worker');
    }
  }
}

export {};
