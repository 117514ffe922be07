CREATE TABLE `stored_chat_completions` (
	`seq` integer PRIMARY KEY NOT NULL,
	`id` text NOT NULL,
	`workspace_id` text NOT NULL,
	`created_at` integer NOT NULL,
	`model` text NOT NULL,
	`metadata` text NOT NULL,
	`completion` text NOT NULL,
	`messages` text NOT NULL,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `stored_chat_completions_id` ON `stored_chat_completions` (`workspace_id`,`id`);--> statement-breakpoint
CREATE INDEX `stored_chat_completions_workspace` ON `stored_chat_completions` (`workspace_id`,`seq`);