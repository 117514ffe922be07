import type { Workspace } from './api';

/** Who is signed in: the workspaces the key may act on and the one the pages show. */
export interface Session {
  workspaces: Workspace[];
  workspace: Workspace;
}

/** What every page is given: where to draw, the session, and a way to redraw itself. */
export interface PageContext {
  view: HTMLElement;
  session: Session;
  redraw: () => void;
  /** The rest of the fragment: `#/runs/<thread>/<run>?status=failed` gives the runs page its two ids and a query. */
  route: Route;
}

export interface Route {
  params: string[];
  query: URLSearchParams;
}

export interface PageDefinition {
  path: string;
  title: string;
  draw: (context: PageContext) => Promise<void>;
}
