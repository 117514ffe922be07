CREATE TABLE `responses` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`thread_id` text NOT NULL,
	`conversation_id` text,
	`previous_response_id` text,
	`stored` integer NOT NULL,
	`background` integer NOT NULL,
	`input` text NOT NULL,
	`options` text NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `responses_id` ON `responses` (`id`);--> statement-breakpoint
CREATE INDEX `responses_thread` ON `responses` (`thread_id`);--> statement-breakpoint
ALTER TABLE `runs` ADD `kind` text DEFAULT 'run' NOT NULL;--> statement-breakpoint
ALTER TABLE `runs` ADD `reasoning_effort` text;