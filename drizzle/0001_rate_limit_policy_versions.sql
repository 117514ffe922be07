CREATE TABLE `rate_limit_policy_versions` (
	`workspace_id` text PRIMARY KEY NOT NULL,
	`version` integer NOT NULL
);
--> statement-breakpoint
-- Every change to a workspace's policies bumps its version in the same transaction (see schema.ts).
CREATE TRIGGER `rate_limit_policies_version_insert` AFTER INSERT ON `rate_limit_policies` BEGIN
	INSERT INTO `rate_limit_policy_versions` (`workspace_id`, `version`) VALUES (NEW.`workspace_id`, 1)
		ON CONFLICT (`workspace_id`) DO UPDATE SET `version` = `version` + 1;
END;
--> statement-breakpoint
CREATE TRIGGER `rate_limit_policies_version_update` AFTER UPDATE ON `rate_limit_policies` BEGIN
	INSERT INTO `rate_limit_policy_versions` (`workspace_id`, `version`) VALUES (NEW.`workspace_id`, 1)
		ON CONFLICT (`workspace_id`) DO UPDATE SET `version` = `version` + 1;
	INSERT INTO `rate_limit_policy_versions` (`workspace_id`, `version`)
		SELECT OLD.`workspace_id`, 1 WHERE OLD.`workspace_id` IS NOT NEW.`workspace_id`
		ON CONFLICT (`workspace_id`) DO UPDATE SET `version` = `version` + 1;
END;
--> statement-breakpoint
CREATE TRIGGER `rate_limit_policies_version_delete` AFTER DELETE ON `rate_limit_policies` BEGIN
	INSERT INTO `rate_limit_policy_versions` (`workspace_id`, `version`) VALUES (OLD.`workspace_id`, 1)
		ON CONFLICT (`workspace_id`) DO UPDATE SET `version` = `version` + 1;
END;
