CREATE INDEX `runs_workspace` ON `runs` (`workspace_id`,`kind`,`seq`);--> statement-breakpoint
CREATE INDEX `runs_workspace_created` ON `runs` (`workspace_id`,`kind`,`created_at`);--> statement-breakpoint
CREATE INDEX `threads_workspace` ON `threads` (`workspace_id`,`seq`);