import { defineConfig } from 'drizzle-kit';

// `npm run db:generate` turns src/db/schema.ts into a new SQL migration in drizzle/.
export default defineConfig({
  dialect: 'sqlite',
  schema: './src/db/schema.ts',
  out: './drizzle',
});
