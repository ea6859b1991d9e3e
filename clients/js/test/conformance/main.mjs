// The conformance run of the JS SDK (conformance.md A.7, B.6, C.1): the vectors runner, then the
// scenario runner, then exactly one summary line `js: N passed, M failed`. Exit 0 exactly when M is 0.
//
//   FENEC_VECTORS    a vectors file (default: the project's conformance/builder.json)
//   FENEC_SCENARIOS  a scenarios file (default: the project's conformance/worker-scenarios.json)
//   FENEC_ONLY       run only the cases and scenarios whose name holds this text
//   FENEC_URL, FENEC_TOKEN, FENEC_REQUIRE_SERVER=1   the live server of Part B
//   FENEC_POLICY_URL, FENEC_POLICY_ROOT_TOKEN, FENEC_POLICY_TOKENS, FENEC_POLICY_SCENARIO   the policy server
//   FENEC_PRIMARY_URL, FENEC_REPLICA_URL, FENEC_REPLICA_SCENARIOS   a primary and its replica (the replica cases)
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runVectors } from './vectors.mjs';
import { runScenarios } from './scenarios.mjs';
import { runPolicyScenario } from './policy.mjs';
import { runReplicaCases } from './replicas.mjs';

// The repository root, from this file's place (clients/js/test/conformance), never from the cwd.
const ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
// The project's own file covers every rule of R1–R22 (A.9); fewer cases than this means it was cut.
const PROJECT_MIN_CASES = 200;

const env = process.env;
const pick = (name, fallback) => (env[name] ? resolve(process.cwd(), env[name]) : fallback);
const vectors = pick('FENEC_VECTORS', resolve(ROOT, 'conformance/builder.json'));
const scenarios = pick('FENEC_SCENARIOS', resolve(ROOT, 'conformance/worker-scenarios.json'));
const only = env.FENEC_ONLY || undefined;

const isProject = vectors === resolve(ROOT, 'conformance/builder.json');
const v = await runVectors(vectors, { only, minCases: isProject ? PROJECT_MIN_CASES : 1 });
const s = await runScenarios(scenarios, {
  url: env.FENEC_URL || undefined,
  token: env.FENEC_TOKEN || undefined,
  only,
  requireServer: env.FENEC_REQUIRE_SERVER === '1',
});
// The worker under the docs' policy, on the second server run.py started (FENEC_POLICY_*).
const p = await runPolicyScenario({ only });
// The replica cases, when run.py started a primary and its replica (FENEC_PRIMARY_URL, ...).
const r = await runReplicaCases({ only });
const passed = v.passed + s.passed + p.passed + r.passed;
const failed = v.failed + s.failed + p.failed + r.failed;
console.log(`js: ${passed} passed, ${failed} failed`);
process.exitCode = failed === 0 ? 0 : 1;
