#!/usr/bin/env node
// The `gateway` command of the package: the admin CLI (src/cli/main.ts), run through tsx.
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
