// End-to-end driver: the packaged .vsix in a real VS Code (code-server 4.100.3 = VS Code 1.100.3)
// in headless Chromium, against the real MemoSight server.
//   1. the .vsix installs into code-server (`--install-extension`);
//   2. code-server opens a fixture workspace with the installed extension as the development
//      extension and runs the mocha suite (out/test/suite) in its extension host;
//   3. meanwhile this script watches the editor DOM for ghost text, screenshots it, and tells the
//      suite through a file (ghost-seen.json); it also does what the suite asks of the browser
//      (browser-request-*.json: press a key, read the next-edit decorations), replying in files.
// Prints every check and "N passed, N failed"; exits 1 on any failure.
//
// Environment: MEMOSIGHT_PYTHON (interpreter with memosight_lsp importable; default
// <repo>/.venv/bin/python), MEMOSIGHT_E2E_MODEL (model folder; default .e2e/tiny-model),
// CODE_SERVER (default .e2e/code-server/node_modules/.bin/code-server), CHROMIUM
// (default /usr/bin/chromium), MEMOSIGHT_E2E_TIMEOUT_S (default 240).

import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import * as path from 'node:path';
import { chromium, type Page } from 'playwright-core';

const EXT_ROOT = path.resolve(__dirname, '../..');
const REPO_ROOT = path.resolve(EXT_ROOT, '../..');
const E2E = path.join(EXT_ROOT, '.e2e');
const ARTIFACTS = path.join(E2E, 'artifacts');
const RUN = path.join(E2E, 'run');
const manifest = require(path.join(EXT_ROOT, 'package.json')) as { name: string; publisher: string; version: string };
const EXTENSION_ID = `${manifest.publisher}.${manifest.name}`;

const env = (name: string, fallback: string): string => process.env[name] || fallback;
const PYTHON = env('MEMOSIGHT_PYTHON', path.join(REPO_ROOT, '.venv/bin/python'));
const MODEL = env('MEMOSIGHT_E2E_MODEL', path.join(E2E, 'tiny-model'));
const CODE_SERVER = env('CODE_SERVER', path.join(E2E, 'code-server/node_modules/.bin/code-server'));
const CHROMIUM = env('CHROMIUM', '/usr/bin/chromium');
const TIMEOUT_MS = Number(env('MEMOSIGHT_E2E_TIMEOUT_S', '240')) * 1000;
const VSIX = process.argv[2] ?? path.join(EXT_ROOT, `${manifest.name}-${manifest.version}.vsix`);

interface Check {
  name: string;
  ok: boolean;
  detail: string;
}
const checks: Check[] = [];
function check(name: string, ok: boolean, detail = ''): void {
  checks.push({ name, ok, detail });
  console.log(`${ok ? 'ok    ' : 'FAILED'} ${name}${detail ? ` — ${detail}` : ''}`);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

/** code-server's environment: private config/data folders, no gallery, the server importable. */
function codeServerEnv(): NodeJS.ProcessEnv {
  return {
    ...process.env,
    XDG_CONFIG_HOME: path.join(RUN, 'xdg-config'),
    XDG_DATA_HOME: path.join(RUN, 'xdg-data'),
    EXTENSIONS_GALLERY: '{}',
    PYTHONPATH: [REPO_ROOT, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter),
    MEMOSIGHT_E2E_DIR: RUN,
  };
}

/** Installs the .vsix into a fresh extensions folder; returns the unpacked extension's folder. */
function installVsix(extensionsDir: string): string | undefined {
  const install = spawnSync(CODE_SERVER, ['--extensions-dir', extensionsDir, '--install-extension', VSIX], {
    env: codeServerEnv(),
    encoding: 'utf8',
  });
  const list = spawnSync(CODE_SERVER, ['--extensions-dir', extensionsDir, '--list-extensions', '--show-versions'], {
    env: codeServerEnv(),
    encoding: 'utf8',
  });
  const expected = `${EXTENSION_ID}@${manifest.version}`;
  const ok = install.status === 0 && list.stdout.split('\n').includes(expected);
  check('the .vsix installs into code-server', ok, ok ? expected : `${install.stderr}${install.stdout}${list.stdout}`.trim());
  const folder = readdirSync(extensionsDir).find((name) => name.startsWith(`${EXTENSION_ID}-`));
  return ok && folder ? path.join(extensionsDir, folder) : undefined;
}

function makeWorkspace(): string {
  const workspace = path.join(RUN, 'workspace');
  cpSync(path.join(EXT_ROOT, 'e2e/fixture'), workspace, { recursive: true });
  mkdirSync(path.join(workspace, '.vscode'), { recursive: true });
  const settings = {
    'memosight.pythonPath': PYTHON,
    // "default": model.path null, so the server loads its embedded default model (not what
    // "auto", the default, would find on the machine running the test).
    'memosight.model.path': MODEL === 'default' ? null : MODEL,
    'memosight.model.device': 'cpu',
    // These tests compare whole suggestions: no first-response deadline on a loaded machine (a
    // partial answer first, the rest later, is tested in tests/test_latency.py).
    'memosight.completion.firstResponseMs': 0,
    // Next edits only where the suite turns them on (its rename tests): a model's proposal shown
    // as ghost text would change what the completion tests compare.
    'memosight.nextEdit.enabled': false,
    'memosight.serverArgs': ['-v', '--log-file', path.join(ARTIFACTS, 'server.log')],
    'editor.inlineSuggest.enabled': true,
    'editor.quickSuggestions': { other: false, comments: false, strings: false },
    'editor.suggestOnTriggerCharacters': false,
    'workbench.startupEditor': 'none',
    'workbench.tips.enabled': false,
    'security.workspace.trust.enabled': false,
    'git.enabled': false,
    'git.openRepositoryInParentFolders': 'never',
    'telemetry.telemetryLevel': 'off',
    'extensions.autoUpdate': false,
    'extensions.autoCheckUpdates': false,
  };
  writeFileSync(path.join(workspace, '.vscode/settings.json'), JSON.stringify(settings, null, 2));
  return workspace;
}

async function startCodeServer(port: number, workspace: string): Promise<ChildProcess> {
  const args = [
    '--bind-addr', `127.0.0.1:${port}`, '--auth', 'none', '--disable-telemetry', '--disable-update-check',
    '--disable-workspace-trust', '--extensions-dir', path.join(RUN, 'extensions-empty'),
    '--user-data-dir', path.join(RUN, 'user-data'), workspace,
  ];
  const child = spawn(CODE_SERVER, args, { env: codeServerEnv(), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  const log: string[] = [];
  child.stdout?.on('data', (d: Buffer) => log.push(d.toString()));
  child.stderr?.on('data', (d: Buffer) => log.push(d.toString()));
  child.on('exit', () => writeFileSync(path.join(ARTIFACTS, 'code-server.log'), log.join('')));
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(`http://127.0.0.1:${port}/healthz`);
      if (res.ok) {
        return child;
      }
    } catch {
      // Not listening yet.
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`code-server did not answer on port ${port}: ${log.join('')}`);
}

// Run in the page (strings, since this file is compiled without the DOM library). VS Code draws
// the first line of a suggestion as inline decorations, further lines as view lines in a view zone.
const GHOST_TEXT_JS = `(() => {
  const inline = Array.from(document.querySelectorAll('.monaco-editor .view-line .ghost-text-decoration'))
    .map((n) => n.textContent || '').join('');
  const extra = Array.from(document.querySelectorAll('.monaco-editor .view-zones .suggest-preview-text .view-line'))
    .map((n) => n.textContent || '');
  return (inline || extra.length ? [inline, ...extra].join('\\n') : '').replace(/\\u00a0/g, ' ');
})()`;
const GHOST_DOM_JS = `Array.from(document.querySelectorAll('.monaco-editor .view-zones, .monaco-editor .view-line'))
  .filter((n) => n.querySelector('.ghost-text, .ghost-text-decoration')).map((n) => n.outerHTML).join('\\n\\n')`;
const STATUS_BAR_JS = `Array.from(document.querySelectorAll('.statusbar-item'))
  .map((n) => n.textContent || '').filter((t) => t.includes('MemoSight')).join(' | ')`;

/** Waits for ghost text in the editor DOM; screenshots it and tells the suite. */
async function watchGhostText(page: Page, stop: { done: boolean }): Promise<string | undefined> {
  while (!stop.done) {
    const text = await page
      .evaluate<string>(GHOST_TEXT_JS)
      .catch(() => '');
    if (text.trim()) {
      await page.screenshot({ path: path.join(ARTIFACTS, 'ghost-text.png') });
      const statusBar = await page.evaluate<string>(STATUS_BAR_JS).catch(() => '');
      writeFileSync(path.join(ARTIFACTS, 'ghost-text.html'), await page.evaluate<string>(GHOST_DOM_JS).catch(() => ''));
      writeFileSync(path.join(RUN, 'ghost-seen.json'), JSON.stringify({ text, statusBar }));
      return text;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return undefined;
}

// The next-edit decorations drawn in the editor: text struck through, and the `after` content
// (the new text, the hint), which VS Code draws with CSS ::after rules.
const NEXT_EDIT_DOM_JS = `(() => {
  const struck = [];
  const after = [];
  for (const el of document.querySelectorAll('.monaco-editor .view-lines span')) {
    if (getComputedStyle(el).textDecorationLine.includes('line-through')) struck.push(el.textContent || '');
    const content = getComputedStyle(el, '::after').content;
    if (content && content !== 'none' && content !== 'normal') after.push(content.replace(/^"|"$/g, ''));
  }
  return JSON.stringify({ struck, after });
})()`;

/** What the suite asks of the browser, by a file: `press` a key in the page (real keyboard
 * input, so keybindings and their when clauses apply), or read the `nextEditDom` (and
 * screenshot it). The reply goes to browser-reply-<id>.json. */
async function serveBrowserRequests(page: Page, stop: { done: boolean }): Promise<void> {
  while (!stop.done) {
    for (const name of readdirSync(RUN).filter((n) => /^browser-request-[\w-]+\.json$/.test(n))) {
      const id = name.slice('browser-request-'.length, -'.json'.length);
      const request = JSON.parse(readFileSync(path.join(RUN, name), 'utf8')) as { action: string; arg?: string };
      rmSync(path.join(RUN, name));
      let reply: unknown;
      try {
        if (request.action === 'press' && request.arg) {
          await page.keyboard.press(request.arg);
          reply = { ok: true };
        } else if (request.action === 'nextEditDom') {
          reply = JSON.parse(await page.evaluate<string>(NEXT_EDIT_DOM_JS));
          await page.screenshot({ path: path.join(ARTIFACTS, `next-edit${request.arg ? `-${request.arg}` : ''}.png`) });
        } else {
          reply = { error: `unknown request ${JSON.stringify(request)}` };
        }
      } catch (err) {
        reply = { error: String(err) };
      }
      writeWhole(path.join(RUN, `browser-reply-${id}.json`), JSON.stringify(reply));
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Writes `file` beside itself and renames it into place: the suite polls these files while they
 * are rewritten, and must never read half of one. */
function writeWhole(file: string, text: string): void {
  const tmp = `${file}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, file);
}

/** Keeps ghost-latest.json holding the ghost text in the DOM now, rewritten whenever it changes,
 * so the suite can wait for a suggestion to grow with no keystroke. */
async function trackGhostText(page: Page, stop: { done: boolean }): Promise<void> {
  let last: string | undefined;
  while (!stop.done) {
    const text = await page.evaluate<string>(GHOST_TEXT_JS).catch(() => '');
    if (text !== last) {
      last = text;
      writeWhole(path.join(RUN, 'ghost-latest.json'), JSON.stringify({ text, at: Date.now() }));
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The MemoSight output channel (how the server was found, its stderr) into the artifacts. */
function copyExtensionLog(): void {
  const logs = path.join(RUN, 'user-data/logs');
  if (!existsSync(logs)) {
    return;
  }
  const found = (readdirSync(logs, { recursive: true }) as string[]).find((f) => f.endsWith('MemoSight.log'));
  if (found) {
    cpSync(path.join(logs, found), path.join(ARTIFACTS, 'extension.log'));
  }
}

/** The status bar item's text once it shows a latency (else the last text seen). */
async function watchStatusBar(page: Page, stop: { done: boolean }): Promise<string> {
  let text = '';
  while (!stop.done) {
    text = (await page.evaluate<string>(STATUS_BAR_JS).catch(() => '')) || text;
    if (/MemoSight \d/.test(text)) {
      return text;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return text;
}

async function main(): Promise<number> {
  const started = Date.now();
  rmSync(RUN, { recursive: true, force: true });
  mkdirSync(RUN, { recursive: true });
  mkdirSync(ARTIFACTS, { recursive: true });
  for (const [what, file] of [['code-server', CODE_SERVER], ['chromium', CHROMIUM], ['python', PYTHON], ['the .vsix', VSIX], ['the model', MODEL === 'default' ? CHROMIUM : path.join(MODEL, 'config.json')]]) {
    if (!existsSync(file)) {
      check(`${what} is present`, false, `${file} not found (run scripts/ci.sh, or set the environment variables)`);
      return 1;
    }
  }

  const extension = installVsix(path.join(RUN, 'extensions-vsix'));
  if (!extension) {
    return 1;
  }
  const workspace = makeWorkspace();
  const port = await freePort();
  const codeServer = await startCodeServer(port, workspace);
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1',
    ],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    const consoleLines: string[] = [];
    page.on('console', (msg) => consoleLines.push(msg.text().replace(/%c\s*\S+\s*color: #\w+\s*/g, '')));
    const exited = new Promise<number>((resolve) => {
      void page.exposeFunction('codeAutomationExit', (code: number) => resolve(code));
    });
    const remote = (p: string) => `vscode-remote://127.0.0.1:${port}${p}`;
    const payload = JSON.stringify([
      ['extensionDevelopmentPath', remote(extension)],
      ['extensionTestsPath', remote(path.join(EXT_ROOT, 'out/test/suite/index'))],
    ]);
    const url = `http://127.0.0.1:${port}/?folder=${encodeURIComponent(workspace)}&payload=${encodeURIComponent(payload)}`;
    await page.goto(url);
    const stop = { done: false };
    const ghost = watchGhostText(page, stop);
    const tracking = trackGhostText(page, stop);
    const statusWatch = watchStatusBar(page, stop);
    const browserRequests = serveBrowserRequests(page, stop);
    const timeout = new Promise<number>((resolve) => setTimeout(() => resolve(-1), TIMEOUT_MS));
    const code = await Promise.race([exited, timeout]);
    stop.done = true;
    const ghostText = await ghost;
    await tracking;
    await browserRequests;
    await page.screenshot({ path: path.join(ARTIFACTS, 'final.png') }).catch(() => undefined);
    writeFileSync(path.join(ARTIFACTS, 'browser-console.log'), consoleLines.join('\n'));
    copyExtensionLog();
    for (const line of consoleLines.filter((l) => /memosight-e2e|✔|\d+\) /.test(l))) {
      console.log(`  | ${line.replace('%s (%dms) ', '').replace(/ (\d+)$/, ' ($1 ms)')}`);
    }
    check('ghost text from the server is drawn in the editor DOM', ghostText !== undefined,
      ghostText !== undefined ? `${JSON.stringify(ghostText.slice(0, 60))}; screenshot ${path.relative(EXT_ROOT, path.join(ARTIFACTS, 'ghost-text.png'))}` : 'never seen');
    const statusBar = await statusWatch;
    check('the status bar shows MemoSight\'s state and last latency', /MemoSight \d/.test(statusBar), JSON.stringify(statusBar));
    const resultsFile = path.join(RUN, 'results.json');
    if (existsSync(resultsFile)) {
      const results = require(resultsFile) as { passed: number; failed: number; failures: { title: string; error: string }[] };
      for (let i = 0; i < results.passed; i += 1) {
        checks.push({ name: 'suite', ok: true, detail: '' });
      }
      for (const failure of results.failures) {
        check(`suite: ${failure.title}`, false, failure.error.split('\n').slice(0, 3).join(' | '));
      }
      console.log(`extension-host suite: ${results.passed} passed, ${results.failed} failed (exit code ${code})`);
    } else {
      check('the extension-host suite ran to the end', false, code === -1 ? `timed out after ${TIMEOUT_MS / 1000} s` : `exit code ${code}, no results.json`);
    }
  } finally {
    await browser.close();
    if (codeServer.pid) {
      // code-server was started in its own process group: end it with its children (the server).
      try {
        process.kill(-codeServer.pid, 'SIGTERM');
      } catch {
        // Already gone.
      }
    }
  }
  const failed = checks.filter((c) => !c.ok).length;
  console.log(`e2e: ${checks.length - failed} passed, ${failed} failed (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  return failed === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(`e2e: ${err instanceof Error ? err.stack : String(err)}`);
    console.log('e2e: 0 passed, 1 failed');
    process.exit(1);
  },
);
