import type { Assistant, CursorList } from '../api';
import { h, replace, table, when } from '../dom';
import { inWorkspace, link, pageHref, pager } from '../listing';
import type { PageContext, PageDefinition } from '../session';

/** The workspace's assistants, newest first: name, model, tools, and links to their threads and runs. */

const toolNames = (assistant: Assistant) =>
  assistant.tools.map((tool) => tool.function?.name ?? tool.type).join(', ') || 'none';

async function draw({ view, session, route }: PageContext): Promise<void> {
  const list = await inWorkspace<CursorList<Assistant>>(session, '/assistants', {
    limit: 20,
    after: route.query.get('after'),
  });
  replace(
    view,
    table(
      `Assistants of ${session.workspace.name}`,
      ['Name', 'Model', 'Tools', 'Created', 'Threads and runs'],
      list.data.map((assistant) => {
        const name = assistant.name ?? `(unnamed) ${assistant.id}`;
        return [
          name,
          assistant.model,
          toolNames(assistant),
          when(assistant.created_at),
          h(
            'span',
            {},
            link(pageHref('/threads', [], { assistant_id: assistant.id }), 'Threads', `Threads of ${name}`),
            ' · ',
            link(pageHref('/runs', [], { assistant_id: assistant.id }), 'Runs', `Runs of ${name}`),
          ),
        ];
      }),
    ),
    pager(list, '/assistants', route),
  );
}

export const assistantsPage: PageDefinition = { path: '/assistants', title: 'Assistants', draw };
