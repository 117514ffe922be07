CREATE TABLE `container_files` (
	`seq` integer PRIMARY KEY NOT NULL,
	`container_id` text NOT NULL,
	`file_id` text NOT NULL,
	`path` text NOT NULL,
	`source` text NOT NULL,
	`bytes` integer NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `container_files_path` ON `container_files` (`container_id`,`path`);--> statement-breakpoint
CREATE INDEX `container_files_file` ON `container_files` (`container_id`,`file_id`);--> statement-breakpoint
CREATE INDEX `container_files_container` ON `container_files` (`container_id`,`seq`);--> statement-breakpoint
CREATE TABLE `containers` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`name` text NOT NULL,
	`thread_id` text,
	`expires_after_minutes` integer NOT NULL,
	`memory_limit` text,
	`created_at` integer NOT NULL,
	`last_active_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `containers_id` ON `containers` (`id`);--> statement-breakpoint
CREATE INDEX `containers_workspace` ON `containers` (`workspace_id`,`seq`);--> statement-breakpoint
CREATE INDEX `containers_thread` ON `containers` (`thread_id`,`seq`);--> statement-breakpoint
ALTER TABLE `responses` ADD `container_id` text;