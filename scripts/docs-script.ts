import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DOCS_SCRIPT } from '../src/http/openapi/docs-page';
import { ASSETS_DIRECTORY } from '../src/runtime/node/static-assets';

/**
 * `npm run docs:script`: writes the reference page's script (DOCS_SCRIPT in src/http/openapi/docs-page.ts:
 * the package, its exact version and the file inside it) into src/http/openapi/assets, from the npm
 * registry through `npm pack`, and checks it against the integrity the page declares. The file is
 * committed, so that neither `npm start` nor the Worker's build needs the package (284 packages,
 * 311 MB installed) nor the network. To move to another version: change the version, run this with
 * `--update`, and put the integrity it prints in DOCS_SCRIPT.
 */

const DOCS_SCRIPT_PATH = join(ASSETS_DIRECTORY, DOCS_SCRIPT.file);
const update = process.argv.includes('--update');
const scratch = mkdtempSync(join(tmpdir(), 'docs-script-'));
try {
  const spec = `${DOCS_SCRIPT.package}@${DOCS_SCRIPT.version}`;
  const tarball = execFileSync('npm', ['pack', spec, '--silent', '--pack-destination', scratch], {
    encoding: 'utf8',
  }).trim();
  execFileSync('tar', ['-xzf', join(scratch, tarball), '-C', scratch, `package/${DOCS_SCRIPT.source}`]);
  const bytes = readFileSync(join(scratch, 'package', DOCS_SCRIPT.source));
  const integrity = `sha384-${createHash('sha384').update(bytes).digest('base64')}`;
  if (integrity !== DOCS_SCRIPT.integrity && !update) {
    throw new Error(
      `${spec}'s ${DOCS_SCRIPT.source} is ${integrity}, not the ${DOCS_SCRIPT.integrity} the page declares.`,
    );
  }
  writeFileSync(DOCS_SCRIPT_PATH, bytes);
  console.log(`Wrote ${DOCS_SCRIPT_PATH} (${bytes.length} bytes, ${integrity})`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
