import * as z from 'zod';
import { Hono } from 'hono';
import { listObject } from '../../http/lists';
import { responds } from '../../http/middleware/responds';
import { validate } from '../../http/middleware/validate';
import { deletedObject, listOf } from '../../http/objects';
import { cursorListQuery } from '../../http/schemas';
import type { ApiEnv } from '../identities/env';
import { workspace } from '../identities/middleware/workspace';
import { fileContent } from '../files/routes';
import { addContainerFile, containerFile, createContainer, deleteContainer, removeContainerFile } from './commands';
import { containerFileObject, containerObject } from './objects';
import { getContainer, listContainerFiles, listContainers } from './queries';
import { createContainerBody, createContainerFileBody, listContainersQuery } from './schemas';
import { toContainerFileJson, toContainerJson } from './wire';

/**
 * /v1/containers, in the workspace of workspace(): containers made, listed, read and deleted, and
 * their files added (by a file's id), listed, read, downloaded and taken out. Another workspace's
 * container is a 404.
 */
export const containerRoutes = new Hono<ApiEnv>()
  .use(workspace())
  .post(
    '/',
    responds({ summary: 'Create a container', ok: containerObject }),
    validate('json', createContainerBody),
    async (c) => {
      const deps = c.get('deps');
      const row = await createContainer(deps, c.get('actor').workspaceId, c.req.valid('json'));
      return c.json(toContainerJson(row, deps.now()));
    },
  )
  .get(
    '/',
    responds({ summary: 'List containers', ok: listOf(containerObject) }),
    validate('query', listContainersQuery),
    async (c) => {
      const { db, now } = c.get('deps');
      const page = await listContainers(db, c.get('actor').workspaceId, c.req.valid('query'));
      const at = now();
      return c.json(listObject(page, (row) => toContainerJson(row, at)));
    },
  )
  .get('/:container_id', responds({ summary: 'Retrieve a container', ok: containerObject }), async (c) => {
    const { db, now } = c.get('deps');
    const row = await getContainer(db, c.get('actor').workspaceId, c.req.param('container_id'));
    return c.json(toContainerJson(row, now()));
  })
  .delete(
    '/:container_id',
    responds({ summary: 'Delete a container', ok: deletedObject('container.deleted') }),
    async (c) => {
      const id = c.req.param('container_id');
      await deleteContainer(c.get('deps'), c.get('actor').workspaceId, id);
      return c.json({ id, object: 'container.deleted' as const, deleted: true as const });
    },
  )
  .post(
    '/:container_id/files',
    responds({ summary: 'Create a container file', ok: containerFileObject }),
    validate('json', createContainerFileBody),
    async (c) => {
      const row = await addContainerFile(
        c.get('deps'),
        c.get('actor').workspaceId,
        c.req.param('container_id'),
        c.req.valid('json').file_id,
      );
      return c.json(toContainerFileJson(row));
    },
  )
  .get(
    '/:container_id/files',
    responds({ summary: 'List container files', ok: listOf(containerFileObject) }),
    validate('query', cursorListQuery),
    async (c) => {
      const { db } = c.get('deps');
      const container = await getContainer(db, c.get('actor').workspaceId, c.req.param('container_id'));
      const page = await listContainerFiles(db, container.id, c.req.valid('query'));
      return c.json(listObject(page, toContainerFileJson));
    },
  )
  .get(
    '/:container_id/files/:file_id',
    responds({ summary: 'Retrieve a container file', ok: containerFileObject }),
    async (c) => {
      const { entry } = await containerFile(
        c.get('deps'),
        c.get('actor').workspaceId,
        c.req.param('container_id'),
        c.req.param('file_id'),
      );
      return c.json(toContainerFileJson(entry));
    },
  )
  .delete(
    '/:container_id/files/:file_id',
    responds({ summary: 'Delete a container file', ok: deletedObject('container.file.deleted') }),
    async (c) => {
      const id = c.req.param('file_id');
      await removeContainerFile(c.get('deps'), c.get('actor').workspaceId, c.req.param('container_id'), id);
      return c.json({ id, object: 'container.file.deleted' as const, deleted: true as const });
    },
  )
  .get(
    '/:container_id/files/:file_id/content',
    responds({ summary: "Retrieve a container file's content", ok: () => z.string(), bytes: true }),
    async (c) => {
      const deps = c.get('deps');
      const { file } = await containerFile(
        deps,
        c.get('actor').workspaceId,
        c.req.param('container_id'),
        c.req.param('file_id'),
      );
      return fileContent(deps.blobs, file);
    },
  );
