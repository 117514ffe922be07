// Written by `npm run build:console` (scripts/build-console.ts) from src/console/client: not to be edited.
export const CONSOLE_ASSETS = {
  script: {
    file: 'console-7c3fc6b85960.js',
    integrity: 'sha384-gf65BWf8fOd4nDPcxsu0ArZmV/yjOZOFMLISBi0n5g4b411wxP8pRM3SBAgtL95q',
  },
  style: {
    file: 'console-90f2d2565c84.css',
    integrity: 'sha384-DYvXDfBuUfclOJkWaWpz+htYSpQ3jG1PC1tWHxzmugVhF4tNc8hwATxbKqCG97fW',
  },
} as const;
