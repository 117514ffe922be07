ALTER TABLE `rate_limit_policies` ADD `created_by` text DEFAULT 'workspace' NOT NULL;--> statement-breakpoint
ALTER TABLE `rate_limit_policies` ADD `version` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX `rate_limit_policies_workspace_version` ON `rate_limit_policies` (`workspace_id`,`version`);--> statement-breakpoint
ALTER TABLE `rate_limit_policy_versions` ADD `active_count` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `rate_limit_policy_versions` ADD `active_bytes` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE `rate_limit_policy_versions` ADD `full_reload_version` integer DEFAULT 0 NOT NULL;--> statement-breakpoint
CREATE INDEX `assistants_live` ON `assistants` (`workspace_id`) WHERE deleted_at IS NULL;--> statement-breakpoint
-- The triggers of 0001 are replaced by ones that also stamp each changed row with the version, keep
-- the workspace's active policies counted (how many, and the bytes of their name, conditions and
-- group_by), and note when a row left a workspace (see schema.ts). The stamping UPDATE is told apart
-- by the version it changes (WHEN NEW.version IS OLD.version), whatever recursive_triggers says.
DROP TRIGGER `rate_limit_policies_version_insert`;--> statement-breakpoint
DROP TRIGGER `rate_limit_policies_version_update`;--> statement-breakpoint
DROP TRIGGER `rate_limit_policies_version_delete`;--> statement-breakpoint
-- Existing policies: counted now; their rows keep version 0, which every cache already holds.
INSERT INTO `rate_limit_policy_versions` (`workspace_id`, `version`, `active_count`, `active_bytes`)
	SELECT `workspace_id`, 1,
		sum(CASE WHEN `status` = 'active' THEN 1 ELSE 0 END),
		sum(CASE WHEN `status` = 'active' THEN (length(CAST(`name` AS BLOB)) + length(CAST(`conditions` AS BLOB)) + length(CAST(`group_by` AS BLOB))) ELSE 0 END)
	FROM `rate_limit_policies` WHERE true GROUP BY `workspace_id`
	ON CONFLICT (`workspace_id`) DO UPDATE SET `version` = `version` + 1,
		`active_count` = excluded.`active_count`, `active_bytes` = excluded.`active_bytes`;--> statement-breakpoint
CREATE TRIGGER `rate_limit_policies_version_insert` AFTER INSERT ON `rate_limit_policies` BEGIN
	INSERT INTO `rate_limit_policy_versions` (`workspace_id`, `version`, `active_count`, `active_bytes`)
		VALUES (NEW.`workspace_id`, 1, (CASE WHEN NEW.`status` = 'active' THEN 1 ELSE 0 END), (CASE WHEN NEW.`status` = 'active' THEN (length(CAST(NEW.`name` AS BLOB)) + length(CAST(NEW.`conditions` AS BLOB)) + length(CAST(NEW.`group_by` AS BLOB))) ELSE 0 END))
		ON CONFLICT (`workspace_id`) DO UPDATE SET `version` = `version` + 1,
			`active_count` = `active_count` + excluded.`active_count`, `active_bytes` = `active_bytes` + excluded.`active_bytes`;
	UPDATE `rate_limit_policies`
		SET `version` = (SELECT `version` FROM `rate_limit_policy_versions` WHERE `workspace_id` = NEW.`workspace_id`)
		WHERE `seq` = NEW.`seq`;
END;--> statement-breakpoint
CREATE TRIGGER `rate_limit_policies_version_update` AFTER UPDATE ON `rate_limit_policies`
WHEN NEW.`version` IS OLD.`version` BEGIN
	UPDATE `rate_limit_policy_versions`
		SET `active_count` = `active_count` - (CASE WHEN OLD.`status` = 'active' THEN 1 ELSE 0 END), `active_bytes` = `active_bytes` - (CASE WHEN OLD.`status` = 'active' THEN (length(CAST(OLD.`name` AS BLOB)) + length(CAST(OLD.`conditions` AS BLOB)) + length(CAST(OLD.`group_by` AS BLOB))) ELSE 0 END)
		WHERE `workspace_id` = OLD.`workspace_id`;
	-- A row that moved to another workspace is gone from this one: its caches reload everything.
	UPDATE `rate_limit_policy_versions` SET `version` = `version` + 1, `full_reload_version` = `version` + 1
		WHERE `workspace_id` = OLD.`workspace_id` AND OLD.`workspace_id` IS NOT NEW.`workspace_id`;
	INSERT INTO `rate_limit_policy_versions` (`workspace_id`, `version`, `active_count`, `active_bytes`)
		VALUES (NEW.`workspace_id`, 1, (CASE WHEN NEW.`status` = 'active' THEN 1 ELSE 0 END), (CASE WHEN NEW.`status` = 'active' THEN (length(CAST(NEW.`name` AS BLOB)) + length(CAST(NEW.`conditions` AS BLOB)) + length(CAST(NEW.`group_by` AS BLOB))) ELSE 0 END))
		ON CONFLICT (`workspace_id`) DO UPDATE SET `version` = `version` + 1,
			`active_count` = `active_count` + excluded.`active_count`, `active_bytes` = `active_bytes` + excluded.`active_bytes`;
	UPDATE `rate_limit_policies`
		SET `version` = (SELECT `version` FROM `rate_limit_policy_versions` WHERE `workspace_id` = NEW.`workspace_id`)
		WHERE `seq` = NEW.`seq`;
END;--> statement-breakpoint
CREATE TRIGGER `rate_limit_policies_version_delete` AFTER DELETE ON `rate_limit_policies` BEGIN
	INSERT INTO `rate_limit_policy_versions` (`workspace_id`, `version`, `full_reload_version`) VALUES (OLD.`workspace_id`, 1, 1)
		ON CONFLICT (`workspace_id`) DO UPDATE SET `version` = `version` + 1, `full_reload_version` = `version` + 1,
			`active_count` = `active_count` - (CASE WHEN OLD.`status` = 'active' THEN 1 ELSE 0 END), `active_bytes` = `active_bytes` - (CASE WHEN OLD.`status` = 'active' THEN (length(CAST(OLD.`name` AS BLOB)) + length(CAST(OLD.`conditions` AS BLOB)) + length(CAST(OLD.`group_by` AS BLOB))) ELSE 0 END);
END;
