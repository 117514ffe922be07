// What `wrangler types` would generate, written by hand so that it does not depend on a local
// .dev.vars: the Worker's bindings, and its main module for `exports` from cloudflare:workers.
declare global {
  namespace Cloudflare {
    interface Env extends import('../../src/worker').Env {}
    interface GlobalProps {
      mainModule: typeof import('../../src/worker');
    }
  }
}

export {};
