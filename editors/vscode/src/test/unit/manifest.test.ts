// package.json, settings.ts and the server's memosight_lsp/config.py must describe the same settings.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { CLIENT_SETTINGS, SERVER_SETTINGS } from '../../settings';

const EXTENSION_ROOT = path.resolve(__dirname, '../../..');
const REPO_ROOT = path.resolve(EXTENSION_ROOT, '../..');

interface Property {
  type: string | string[];
  default: unknown;
  scope?: string;
  markdownDescription?: string;
  enum?: string[];
}
const manifest = JSON.parse(readFileSync(path.join(EXTENSION_ROOT, 'package.json'), 'utf8'));
const properties: Record<string, Property> = manifest.contributes.configuration.properties;

/** The server's defaults and enum choices, from its own config module (camelCase dotted keys). */
function serverSchema(): { defaults: Record<string, unknown>; choices: Record<string, string[]> } | undefined {
  const python = process.env.MEMOSIGHT_PYTHON ?? path.join(REPO_ROOT, '.venv/bin/python');
  if (!existsSync(python) || !existsSync(path.join(REPO_ROOT, 'memosight_lsp/config.py'))) {
    return undefined;
  }
  const code = `
import dataclasses, json, typing
from memosight_lsp.config import Settings, settings_to_wire, snake_to_camel
def flat(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and k != "languages":
            out.update(flat(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out
def choices(cls, prefix=""):
    out = {}
    for f in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[f.name]
        key = prefix + snake_to_camel(f.name)
        if dataclasses.is_dataclass(hint):
            out.update(choices(hint, key + "."))
        elif typing.get_origin(hint) is typing.Literal:
            out[key] = list(typing.get_args(hint))
    return out
print(json.dumps({"defaults": flat(settings_to_wire(Settings())), "choices": choices(Settings)}))
`;
  const out = execFileSync(python, ['-c', code], { cwd: REPO_ROOT, env: { ...process.env, PYTHONPATH: REPO_ROOT } });
  return JSON.parse(out.toString());
}

describe('package.json settings', () => {
  it('documents exactly the server settings plus the client settings', () => {
    const expected = [...SERVER_SETTINGS.map((s) => s.key), ...CLIENT_SETTINGS].map((k) => `memosight.${k}`).sort();
    assert.deepEqual(Object.keys(properties).sort(), expected);
  });

  it('gives every setting a scope and a description', () => {
    for (const [key, prop] of Object.entries(properties)) {
      assert.ok(prop.scope, `${key} has no scope`);
      assert.ok(prop.markdownDescription && prop.markdownDescription.length > 20, `${key} has no description`);
    }
  });

  it('has the same defaults as settings.ts', () => {
    for (const spec of SERVER_SETTINGS) {
      assert.deepEqual(properties[`memosight.${spec.key}`].default, spec.default, spec.key);
    }
  });

  it('matches the server: same keys, defaults and choices as memosight_lsp/config.py', (t) => {
    const schema = serverSchema();
    if (!schema) {
      t.skip('no Python environment with memosight_lsp (set MEMOSIGHT_PYTHON)');
      return;
    }
    assert.deepEqual(SERVER_SETTINGS.map((s) => s.key).sort(), Object.keys(schema.defaults).sort());
    for (const spec of SERVER_SETTINGS) {
      assert.deepEqual(spec.default, schema.defaults[spec.key], `default of ${spec.key}`);
    }
    for (const [key, choices] of Object.entries(schema.choices)) {
      assert.deepEqual(properties[`memosight.${key}`].enum, choices, `choices of ${key}`);
    }
  });

  it('is documented in docs/vscode.md: every setting with its default and scope', (t) => {
    const docsFile = path.join(REPO_ROOT, 'docs/vscode.md');
    if (!existsSync(docsFile)) {
      t.skip('no docs/vscode.md next to this extension');
      return;
    }
    const docs = readFileSync(docsFile, 'utf8');
    for (const [key, prop] of Object.entries(properties)) {
      const row = `| \`${key}\` | \`${JSON.stringify(prop.default)}\` | ${prop.scope} |`;
      assert.ok(docs.includes(row), `docs/vscode.md lacks the row ${row}`);
    }
  });

  it('declares every command it registers, in the MemoSight category', () => {
    const source = readFileSync(path.join(EXTENSION_ROOT, 'src/extension.ts'), 'utf8');
    const registered = Array.from(source.matchAll(/registerCommand\('([^']+)'/g), (m) => m[1]).sort();
    const declared = manifest.contributes.commands.map((c: { command: string }) => c.command).sort();
    assert.deepEqual(declared, registered);
    for (const c of manifest.contributes.commands) {
      assert.equal(c.category, 'MemoSight');
    }
  });
});
