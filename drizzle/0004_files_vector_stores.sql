CREATE TABLE `files` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`purpose` text NOT NULL,
	`filename` text NOT NULL,
	`bytes` integer NOT NULL,
	`content_type` text,
	`blob_key` text NOT NULL,
	`created_at` integer NOT NULL,
	`expires_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `files_id` ON `files` (`id`);--> statement-breakpoint
CREATE INDEX `files_workspace` ON `files` (`workspace_id`,`seq`);--> statement-breakpoint
CREATE INDEX `files_workspace_purpose` ON `files` (`workspace_id`,`purpose`,`seq`);--> statement-breakpoint
CREATE TABLE `vector_store_chunks` (
	`id` integer PRIMARY KEY NOT NULL,
	`vector_store_id` text NOT NULL,
	`file_id` text NOT NULL,
	`chunk_index` integer NOT NULL,
	`text` text NOT NULL,
	`tokens` integer NOT NULL,
	`embedding` blob NOT NULL
);
--> statement-breakpoint
CREATE INDEX `vector_store_chunks_store_file` ON `vector_store_chunks` (`vector_store_id`,`file_id`,`chunk_index`);--> statement-breakpoint
CREATE TABLE `vector_store_file_batches` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`vector_store_id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`cancelled_at` integer,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `vector_store_file_batches_id` ON `vector_store_file_batches` (`id`);--> statement-breakpoint
CREATE INDEX `vector_store_file_batches_store` ON `vector_store_file_batches` (`vector_store_id`);--> statement-breakpoint
CREATE TABLE `vector_store_files` (
	`seq` integer PRIMARY KEY NOT NULL,
	`vector_store_id` text NOT NULL,
	`file_id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`batch_id` text,
	`status` text NOT NULL,
	`usage_bytes` integer DEFAULT 0 NOT NULL,
	`chunking_strategy` text NOT NULL,
	`attributes` text NOT NULL,
	`last_error` text,
	`created_at` integer NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`lease_expires_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `vector_store_files_store_file` ON `vector_store_files` (`vector_store_id`,`file_id`);--> statement-breakpoint
CREATE INDEX `vector_store_files_store` ON `vector_store_files` (`vector_store_id`,`status`,`seq`);--> statement-breakpoint
CREATE INDEX `vector_store_files_batch` ON `vector_store_files` (`batch_id`,`seq`);--> statement-breakpoint
CREATE INDEX `vector_store_files_file` ON `vector_store_files` (`file_id`);--> statement-breakpoint
CREATE INDEX `vector_store_files_pending` ON `vector_store_files` (`lease_expires_at`) WHERE status = 'in_progress';--> statement-breakpoint
CREATE TABLE `vector_stores` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`name` text,
	`metadata` text NOT NULL,
	`expires_after` text,
	`expires_at` integer,
	`created_at` integer NOT NULL,
	`last_active_at` integer NOT NULL,
	`embedding_model` text NOT NULL,
	`embedding_dimensions` integer,
	`virtual_key_id` text,
	`deleted_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `vector_stores_id` ON `vector_stores` (`id`);--> statement-breakpoint
CREATE INDEX `vector_stores_workspace` ON `vector_stores` (`workspace_id`,`seq`);--> statement-breakpoint
ALTER TABLE `workspaces` ADD `embeddings_model` text;--> statement-breakpoint
CREATE VIRTUAL TABLE `vector_store_chunks_fts` USING fts5(`text`, `vector_store_id`, content='vector_store_chunks', content_rowid='id');--> statement-breakpoint
CREATE TRIGGER `vector_store_chunks_fts_insert` AFTER INSERT ON `vector_store_chunks` BEGIN
  INSERT INTO `vector_store_chunks_fts` (rowid, `text`, `vector_store_id`) VALUES (new.id, new.text, new.vector_store_id);
END;--> statement-breakpoint
CREATE TRIGGER `vector_store_chunks_fts_delete` AFTER DELETE ON `vector_store_chunks` BEGIN
  INSERT INTO `vector_store_chunks_fts` (`vector_store_chunks_fts`, rowid, `text`, `vector_store_id`) VALUES ('delete', old.id, old.text, old.vector_store_id);
END;
