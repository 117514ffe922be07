CREATE TABLE `api_keys` (
	`id` text PRIMARY KEY NOT NULL,
	`kind` text NOT NULL,
	`organisation_id` text NOT NULL,
	`workspace_id` text,
	`name` text NOT NULL,
	`prefix` text NOT NULL,
	`hash` text NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer,
	FOREIGN KEY (`organisation_id`) REFERENCES `organisations`(`id`) ON UPDATE no action ON DELETE no action,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `api_keys_hash` ON `api_keys` (`hash`);--> statement-breakpoint
CREATE INDEX `api_keys_organisation` ON `api_keys` (`organisation_id`);--> statement-breakpoint
CREATE TABLE `assistants` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`created_at` integer NOT NULL,
	`name` text,
	`description` text,
	`model` text NOT NULL,
	`instructions` text,
	`tools` text NOT NULL,
	`tool_resources` text,
	`metadata` text NOT NULL,
	`temperature` real,
	`top_p` real,
	`response_format` text,
	`deleted_at` integer,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `assistants_id` ON `assistants` (`id`);--> statement-breakpoint
CREATE INDEX `assistants_workspace` ON `assistants` (`workspace_id`,`seq`);--> statement-breakpoint
CREATE TABLE `messages` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`thread_id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`created_at` integer NOT NULL,
	`role` text NOT NULL,
	`content` text NOT NULL,
	`status` text NOT NULL,
	`assistant_id` text,
	`run_id` text,
	`attachments` text NOT NULL,
	`metadata` text NOT NULL,
	`incomplete_details` text,
	`completed_at` integer,
	`incomplete_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `messages_id` ON `messages` (`id`);--> statement-breakpoint
CREATE INDEX `messages_thread` ON `messages` (`thread_id`,`seq`);--> statement-breakpoint
CREATE TABLE `organisations` (
	`id` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `rate_limit_counters` (
	`key` text PRIMARY KEY NOT NULL,
	`used` real NOT NULL,
	`window_end` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `rate_limit_counters_window_end` ON `rate_limit_counters` (`window_end`);--> statement-breakpoint
CREATE TABLE `rate_limit_policies` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`organisation_id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`name` text NOT NULL,
	`type` text NOT NULL,
	`unit` text NOT NULL,
	`value` real NOT NULL,
	`status` text NOT NULL,
	`conditions` text NOT NULL,
	`group_by` text NOT NULL,
	`created_at` integer NOT NULL,
	`last_updated_at` integer NOT NULL,
	FOREIGN KEY (`organisation_id`) REFERENCES `organisations`(`id`) ON UPDATE no action ON DELETE no action,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `rate_limit_policies_id` ON `rate_limit_policies` (`id`);--> statement-breakpoint
CREATE INDEX `rate_limit_policies_workspace` ON `rate_limit_policies` (`workspace_id`,`status`,`seq`);--> statement-breakpoint
CREATE INDEX `rate_limit_policies_organisation` ON `rate_limit_policies` (`organisation_id`,`status`,`seq`);--> statement-breakpoint
CREATE TABLE `run_steps` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`run_id` text NOT NULL,
	`thread_id` text NOT NULL,
	`assistant_id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`type` text NOT NULL,
	`status` text NOT NULL,
	`step_details` text NOT NULL,
	`created_at` integer NOT NULL,
	`completed_at` integer,
	`cancelled_at` integer,
	`failed_at` integer,
	`expired_at` integer,
	`last_error` text,
	`usage` text
);
--> statement-breakpoint
CREATE UNIQUE INDEX `run_steps_id` ON `run_steps` (`id`);--> statement-breakpoint
CREATE INDEX `run_steps_run` ON `run_steps` (`run_id`,`seq`);--> statement-breakpoint
CREATE TABLE `runs` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`thread_id` text NOT NULL,
	`assistant_id` text NOT NULL,
	`virtual_key_id` text NOT NULL,
	`api_key_id` text NOT NULL,
	`status` text NOT NULL,
	`created_at` integer NOT NULL,
	`started_at` integer,
	`expires_at` integer,
	`cancelled_at` integer,
	`failed_at` integer,
	`completed_at` integer,
	`required_action` text,
	`last_error` text,
	`incomplete_details` text,
	`model` text NOT NULL,
	`instructions` text NOT NULL,
	`tools` text NOT NULL,
	`tool_resources` text,
	`metadata` text NOT NULL,
	`usage` text,
	`max_prompt_tokens` integer,
	`max_completion_tokens` integer,
	`truncation_strategy` text NOT NULL,
	`tool_choice` text NOT NULL,
	`parallel_tool_calls` integer NOT NULL,
	`response_format` text NOT NULL,
	`temperature` real,
	`top_p` real,
	`rate_limit` text,
	`lease_expires_at` integer
);
--> statement-breakpoint
CREATE UNIQUE INDEX `runs_id` ON `runs` (`id`);--> statement-breakpoint
CREATE INDEX `runs_thread` ON `runs` (`thread_id`,`seq`);--> statement-breakpoint
CREATE INDEX `runs_active_lease` ON `runs` (`lease_expires_at`) WHERE status IN ('queued', 'in_progress', 'cancelling');--> statement-breakpoint
CREATE TABLE `threads` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`created_at` integer NOT NULL,
	`metadata` text NOT NULL,
	`tool_resources` text,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `threads_id` ON `threads` (`id`);--> statement-breakpoint
CREATE TABLE `virtual_keys` (
	`id` text PRIMARY KEY NOT NULL,
	`workspace_id` text NOT NULL,
	`slug` text NOT NULL,
	`provider` text NOT NULL,
	`base_url` text NOT NULL,
	`secret_ciphertext` text NOT NULL,
	`options` text NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `virtual_keys_workspace_slug` ON `virtual_keys` (`workspace_id`,`slug`) WHERE revoked_at IS NULL;--> statement-breakpoint
CREATE TABLE `workspaces` (
	`id` text PRIMARY KEY NOT NULL,
	`organisation_id` text NOT NULL,
	`slug` text NOT NULL,
	`name` text NOT NULL,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`organisation_id`) REFERENCES `organisations`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `workspaces_organisation_slug` ON `workspaces` (`organisation_id`,`slug`);