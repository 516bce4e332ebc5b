// Entry point of the end-to-end suite, run by VS Code inside the real extension host
// (extensionTestsPath). Mocha prints nothing the CI can read, so the counts go to results.json
// in MEMOSIGHT_E2E_DIR and to the console as "N passed, N failed".

import { writeFileSync } from 'node:fs';
import * as path from 'node:path';
import Mocha from 'mocha';

interface Failure {
  title: string;
  error: string;
}

export function run(): Promise<void> {
  const mocha = new Mocha({ ui: 'bdd', timeout: 60_000, color: false, reporter: 'spec' });
  mocha.addFile(path.join(__dirname, 'e2e.test.js'));
  return new Promise((resolve, reject) => {
    let passed = 0;
    const failures: Failure[] = [];
    const runner = mocha.run(() => {
      const summary = `${passed} passed, ${failures.length} failed`;
      console.log(`[memosight-e2e] suite: ${summary}`);
      const dir = process.env.MEMOSIGHT_E2E_DIR;
      if (dir) {
        writeFileSync(path.join(dir, 'results.json'), JSON.stringify({ passed, failed: failures.length, failures }, null, 2));
      }
      if (failures.length > 0) {
        reject(new Error(summary));
      } else {
        resolve();
      }
    });
    runner.on('pass', () => {
      passed += 1;
    });
    runner.on('fail', (test, err: Error) => {
      failures.push({ title: test.fullTitle(), error: err.stack ?? String(err) });
    });
  });
}
