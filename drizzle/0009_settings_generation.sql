CREATE TABLE `settings_generation` (
	`id` integer PRIMARY KEY NOT NULL,
	`value` integer NOT NULL
);
--> statement-breakpoint
-- One row, generation 0; every change to the settings a request reads bumps it, in the change's
-- own transaction (SettingsCache, src/services/settings-cache.ts).
INSERT INTO `settings_generation` (`id`, `value`) VALUES (0, 0);
--> statement-breakpoint
CREATE TRIGGER `api_keys_settings_generation_insert` AFTER INSERT ON `api_keys` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `api_keys_settings_generation_update` AFTER UPDATE ON `api_keys` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `api_keys_settings_generation_delete` AFTER DELETE ON `api_keys` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `workspaces_settings_generation_insert` AFTER INSERT ON `workspaces` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `workspaces_settings_generation_update` AFTER UPDATE ON `workspaces` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `workspaces_settings_generation_delete` AFTER DELETE ON `workspaces` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `assistants_settings_generation_insert` AFTER INSERT ON `assistants` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `assistants_settings_generation_update` AFTER UPDATE ON `assistants` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `assistants_settings_generation_delete` AFTER DELETE ON `assistants` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `virtual_keys_settings_generation_insert` AFTER INSERT ON `virtual_keys` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `virtual_keys_settings_generation_update` AFTER UPDATE ON `virtual_keys` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `virtual_keys_settings_generation_delete` AFTER DELETE ON `virtual_keys` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `rate_limit_policies_settings_generation_insert` AFTER INSERT ON `rate_limit_policies` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `rate_limit_policies_settings_generation_update` AFTER UPDATE ON `rate_limit_policies` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
--> statement-breakpoint
CREATE TRIGGER `rate_limit_policies_settings_generation_delete` AFTER DELETE ON `rate_limit_policies` BEGIN
	UPDATE `settings_generation` SET `value` = `value` + 1 WHERE `id` = 0;
END;
